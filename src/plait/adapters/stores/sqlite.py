"""The embedded default store: one SQLite file in WAL mode with ``synchronous=FULL``.

Every port write is exactly one ``BEGIN IMMEDIATE … COMMIT`` transaction (durable when the
call returns); reads run without an explicit transaction. The blocking calls happen
directly inside the ``async def`` methods (none of them suspends): for one caller (the
CLI, a benchmark) a commit costs less than a hand-off to a thread. A server serving many
sessions from one event loop wraps the store in
:class:`~plait.adapters.stores.offload.Offloaded` (``Runtime.open(offload_store=True)``, as
``plait serve`` does): every call then runs on a worker thread, so one slow fsync never
stalls the other sessions. No transaction is ever held open across an ``await``.

Several processes may share the file: ``PRAGMA busy_timeout`` makes a writer wait for the
write lock instead of failing; the version compare-and-set inside the transaction turns a
lost race into :class:`~plait.domain.errors.ConflictError`, never an interleaving. Every
``sqlite3`` exception is translated at this edge (locked → ConflictError, corrupt or not a
database → CorruptStoreError naming the file, anything else → StoreError).

Messages live in columns, not JSON blobs, because loading history is the hot read path:
``extra`` holds compact JSON only for the sparse parts (tool calls, usage, vendor state,
reason, artifact). Bodies are keyed by message id and joined through ``session_messages``
so forks can share them.
"""

from __future__ import annotations

import contextlib
import gc
import sqlite3
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from plait.adapters.stores import _approvals_sqlite, _codec, _sqlite_fork
from plait.adapters.stores import _sqlite_service as _service
from plait.adapters.stores import _sqlite_summaries as _summaries
from plait.adapters.stores._sqlite_rows import (
    decode_messages,
    execution_row,
    json_value,
    message_row,
    run_data,
    run_from_row,
    session_from_row,
    session_row,
)
from plait.adapters.stores._state import (
    ARTIFACT_CHUNK,
    artifact_not_found,
    artifact_ref,
    artifact_ref_of_file,
    check_execution,
    check_new_session,
    closed_error,
    duplicate_message,
    duplicate_run,
    duplicate_session,
    lease_lost,
    resolve_lease,
    run_not_found,
    session_busy,
    session_not_found,
    validate_commit,
    version_conflict,
)
from plait.application.ports import Commit, CommitResult, ForkCommit
from plait.domain.errors import (
    ConflictError,
    CorruptStoreError,
    PlaitError,
    StoreError,
)
from plait.domain.forks import ForkRecord
from plait.domain.governance import Approval, ApprovalUse
from plait.domain.messages import ArtifactRef, Message
from plait.domain.recall import search_terms
from plait.domain.runs import Run, RunStatus
from plait.domain.service import ApiKey, NewRunEvent, RunEventRecord
from plait.domain.session import ExecutionRecord, ExecutionState, Session, StoredMessage
from plait.domain.summary import Constraint, Summary

__all__ = ["SCHEMA_VERSION", "SqliteStore"]

SCHEMA_VERSION = 1
"""Version of the table layout, kept in ``meta``. Row shapes carry their own version."""

T = TypeVar("T")

_LIVE = ", ".join(f"'{s.value}'" for s in RunStatus if not s.terminal)

_DDL = (
    "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID",
    # No version column: a session's version is its highest seq, so appending a message
    # writes no session row (one page less per commit); the (session_id, seq) key makes a
    # second writer at the same version fail instead of interleaving.
    """CREATE TABLE IF NOT EXISTS sessions (
        id TEXT PRIMARY KEY, created_at REAL NOT NULL, owner TEXT, workspace TEXT,
        active_run_id TEXT, parent_session_id TEXT, fork_point_message_id TEXT, title TEXT)""",
    "CREATE INDEX IF NOT EXISTS sessions_by_created ON sessions (created_at)",
    # Immutable bodies under an integer key: appended at the end of one b-tree, and the
    # history read joins on integers. Ids are unique per session (session_messages_by_id).
    """CREATE TABLE IF NOT EXISTS messages (
        pk INTEGER PRIMARY KEY, id TEXT NOT NULL, kind TEXT NOT NULL, text TEXT NOT NULL,
        created_at REAL NOT NULL, run_id TEXT, step INTEGER, call_id TEXT, name TEXT,
        status TEXT, extra TEXT, schema_version INTEGER NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS session_messages (
        session_id TEXT NOT NULL, seq INTEGER NOT NULL, message_id TEXT NOT NULL,
        message_pk INTEGER NOT NULL, PRIMARY KEY (session_id, seq)) WITHOUT ROWID""",
    """CREATE UNIQUE INDEX IF NOT EXISTS session_messages_by_id
        ON session_messages (session_id, message_id)""",
    """CREATE TABLE IF NOT EXISTS runs (
        id TEXT PRIMARY KEY, session_id TEXT NOT NULL, status TEXT NOT NULL,
        started_at REAL NOT NULL, lease_owner TEXT, lease_expires_at REAL,
        cancel_requested INTEGER NOT NULL DEFAULT 0, data TEXT NOT NULL)""",
    "CREATE INDEX IF NOT EXISTS runs_by_session ON runs (session_id, started_at)",
    "CREATE INDEX IF NOT EXISTS runs_by_started ON runs (started_at)",
    # On status, not on the lease: renewing a lease must not rewrite an index page.
    f"CREATE INDEX IF NOT EXISTS runs_live ON runs (status) WHERE status IN ({_LIVE})",
    """CREATE TABLE IF NOT EXISTS executions (
        session_id TEXT NOT NULL, run_id TEXT NOT NULL, call_id TEXT NOT NULL,
        state TEXT NOT NULL, args_digest TEXT NOT NULL, data TEXT NOT NULL,
        PRIMARY KEY (session_id, run_id, call_id))""",
    """CREATE TABLE IF NOT EXISTS artifacts (
        id TEXT PRIMARY KEY, sha256 TEXT NOT NULL, size INTEGER NOT NULL,
        media_type TEXT NOT NULL, data BLOB NOT NULL)""",
)

_VERSION_OF = "coalesce((SELECT max(seq) FROM session_messages WHERE session_id = s.id), 0)"
_SESSION_COLS = (
    f"s.id, s.created_at, s.owner, s.workspace, {_VERSION_OF}, s.active_run_id, "
    "s.parent_session_id, s.fork_point_message_id, s.title"
)
_RUN_COLS = (
    "id, session_id, status, started_at, lease_owner, lease_expires_at, cancel_requested, data"
)

_INSERT_SESSION = (
    "INSERT INTO sessions (id, created_at, owner, workspace, active_run_id, "
    "parent_session_id, fork_point_message_id, title) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
)
_GET_SESSION = f"SELECT {_SESSION_COLS} FROM sessions AS s WHERE s.id = ?"
_SESSION_VERSION = f"SELECT {_VERSION_OF}, s.active_run_id FROM sessions AS s WHERE s.id = ?"
_LIST_SESSIONS = (
    f"SELECT {_SESSION_COLS} FROM sessions AS s ORDER BY s.created_at DESC, s.rowid DESC LIMIT ?"
)
_CLAIM_SESSION = "UPDATE sessions SET active_run_id = ? WHERE id = ? AND active_run_id IS NULL"
_RELEASE_SESSION = "UPDATE sessions SET active_run_id = NULL WHERE id = ? AND active_run_id = ?"

_INSERT_MESSAGE = (
    "INSERT INTO messages (id, kind, text, created_at, run_id, step, call_id, name, status, "
    "extra, schema_version) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
_INSERT_MEMBER = (
    "INSERT INTO session_messages (session_id, seq, message_id, message_pk) VALUES (?, ?, ?, ?)"
)
_IS_MEMBER = "SELECT 1 FROM session_messages WHERE session_id = ? AND message_id = ?"
_MESSAGE_COLS = (
    "m.kind, m.id, m.text, m.created_at, m.run_id, m.step, m.call_id, m.name, m.status, "
    "m.extra, m.schema_version"
)
_READ_MESSAGES = (
    f"SELECT sm.seq, {_MESSAGE_COLS} FROM session_messages AS sm "
    "JOIN messages AS m ON m.pk = sm.message_pk "
    "WHERE sm.session_id = ? AND sm.seq > ? ORDER BY sm.seq LIMIT ?"
)
_SESSION_EXISTS = "SELECT 1 FROM sessions WHERE id = ?"

_INSERT_RUN = (
    f"INSERT INTO runs ({_RUN_COLS}) VALUES (?, ?, ?, ?, ?, ?, 0, ?) ON CONFLICT (id) DO NOTHING"
)
_GET_RUN = f"SELECT {_RUN_COLS} FROM runs WHERE id = ?"
_RUN_FENCE = (
    "SELECT session_id, lease_owner, lease_expires_at, cancel_requested FROM runs WHERE id = ?"
)
_UPDATE_RUN = (
    "UPDATE runs SET status = ?, started_at = ?, lease_owner = ?, lease_expires_at = ?, "
    "data = ? WHERE id = ?"
)
_RUN_CANCEL_FLAG = "SELECT cancel_requested FROM runs WHERE id = ?"
_RUN_IN_SESSION = "SELECT 1 FROM runs WHERE id = ? AND session_id = ?"
_LIST_RUNS = f"SELECT {_RUN_COLS} FROM runs ORDER BY started_at DESC, rowid DESC"
_LIST_SESSION_RUNS = (
    f"SELECT {_RUN_COLS} FROM runs WHERE session_id = ? ORDER BY started_at DESC, rowid DESC"
)
_CANCEL = f"UPDATE runs SET cancel_requested = 1 WHERE id = ? RETURNING {_RUN_COLS}"
_CLAIM = (
    f"UPDATE runs SET lease_owner = ?, lease_expires_at = ? WHERE id = ? AND status IN ({_LIVE})"
    f" AND (lease_owner IS NULL OR lease_expires_at <= ? OR lease_owner = ?) RETURNING {_RUN_COLS}"
)
_RENEW = "UPDATE runs SET lease_expires_at = ? WHERE id = ? AND lease_owner = ?"
_LEASE = "SELECT lease_owner, lease_expires_at FROM runs WHERE id = ?"
_STALE = (
    f"SELECT {_RUN_COLS} FROM runs WHERE status IN ({_LIVE}) "
    "AND (lease_owner IS NULL OR lease_expires_at <= ?) ORDER BY started_at, rowid"
)

_GET_EXECUTION = (
    "SELECT args_digest, state FROM executions WHERE session_id = ? AND run_id = ? AND call_id = ?"
)
_UPSERT_EXECUTION = (
    "INSERT INTO executions (session_id, run_id, call_id, state, args_digest, data) "
    "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (session_id, run_id, call_id) "
    "DO UPDATE SET state = excluded.state, data = excluded.data"
)
_LIST_EXECUTIONS = (
    "SELECT data FROM executions WHERE session_id = (SELECT session_id FROM runs WHERE id = ?) "
    "AND run_id = ? ORDER BY rowid"
)

_PUT_ARTIFACT = (
    "INSERT INTO artifacts (id, sha256, size, media_type, data) VALUES (?, ?, ?, ?, ?) "
    "ON CONFLICT (id) DO NOTHING"
)
_PUT_ARTIFACT_SIZED = (
    "INSERT INTO artifacts (id, sha256, size, media_type, data) VALUES (?, ?, ?, ?, zeroblob(?)) "
    "ON CONFLICT (id) DO NOTHING"
)
_GET_ARTIFACT = "SELECT id, sha256, size, media_type, data FROM artifacts WHERE id = ?"

_EXEC_STATE = {s.value: s for s in ExecutionState}


# --- the store ------------------------------------------------------------------------------


class SqliteStore:
    """:class:`~plait.application.ports.SessionStore` and
    :class:`~plait.application.ports.ArtifactStore` on one SQLite file."""

    def __init__(self, path: str | Path, *, busy_timeout_s: float = 10.0) -> None:
        self._path = Path(path)
        self._busy_timeout_s = busy_timeout_s
        self._lock = threading.Lock()
        self._conn: sqlite3.Connection | None = self._connect()

    @classmethod
    def open(cls, path: str | Path, *, busy_timeout_s: float = 10.0) -> SqliteStore:
        """Open (creating the file and its parent directories when missing)."""
        path = Path(path)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise StoreError(f"cannot create the directory of {path}: {e}", path=str(path)) from e
        return cls(path, busy_timeout_s=busy_timeout_s)

    def __repr__(self) -> str:
        return f"SqliteStore({str(self._path)!r})"

    @property
    def path(self) -> Path:
        return self._path

    # --- connection and transactions ------------------------------------------------------

    def _connect(self) -> sqlite3.Connection:
        try:
            conn = sqlite3.connect(self._path, isolation_level=None, check_same_thread=False)
        except sqlite3.Error as e:
            raise self._translate(e) from e
        try:
            conn.execute(f"PRAGMA busy_timeout = {int(self._busy_timeout_s * 1000)}")
            # Read before anything writes: a file that is not a database, or a newer
            # schema, must fail here and be left exactly as it was.
            tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
            if "meta" in tables:
                self._check_schema(conn)
            elif tables:
                raise CorruptStoreError(
                    f"{self._path} is a SQLite database but not a plait store (no meta table)",
                    path=str(self._path),
                )
            mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            if mode != "wal" and str(self._path) != ":memory:":
                raise StoreError(
                    f"{self._path}: cannot switch to WAL mode (got {mode!r})",
                    path=str(self._path),
                )
            conn.execute("PRAGMA synchronous = FULL")
            if "meta" not in tables:
                self._create_schema(conn)
        except BaseException as e:
            conn.close()
            if isinstance(e, sqlite3.Error):
                raise self._translate(e) from e
            raise
        return conn

    def _check_schema(self, conn: sqlite3.Connection) -> None:
        row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        try:
            version = int(row[0])
        except (TypeError, ValueError):
            version = -1
        if version > SCHEMA_VERSION:
            raise CorruptStoreError(
                f"{self._path} was written by a newer plait (store schema_version {version}, "
                f"this plait knows {SCHEMA_VERSION}); upgrade plait to open it",
                path=str(self._path),
                schema_version=version,
                supported=SCHEMA_VERSION,
            )
        if version != SCHEMA_VERSION:
            raise CorruptStoreError(
                f"{self._path} has an unknown store schema_version {row!r}",
                path=str(self._path),
            )

    def _create_schema(self, conn: sqlite3.Connection) -> None:
        conn.execute("BEGIN IMMEDIATE")
        try:
            for statement in _DDL:
                conn.execute(statement)
            conn.execute(
                "INSERT INTO meta (key, value) VALUES ('schema_version', ?) "
                "ON CONFLICT (key) DO NOTHING",
                (str(SCHEMA_VERSION),),
            )
            conn.execute("COMMIT")
        except BaseException:
            with contextlib.suppress(sqlite3.Error):
                conn.execute("ROLLBACK")
            raise
        self._check_schema(conn)

    def _translate(self, e: sqlite3.Error) -> PlaitError:
        name = getattr(e, "sqlite_errorname", "")
        where = str(self._path)
        if name.startswith(("SQLITE_BUSY", "SQLITE_LOCKED")) or "locked" in str(e):
            return ConflictError(
                f"{where}: another writer held the database for more than "
                f"{self._busy_timeout_s:g} s ({e}); retry the operation",
                path=where,
                busy_timeout_s=self._busy_timeout_s,
            )
        if name.startswith(("SQLITE_CORRUPT", "SQLITE_NOTADB")):
            return CorruptStoreError(f"{where} is not a valid plait SQLite store: {e}", path=where)
        if isinstance(e, sqlite3.ProgrammingError) and "closed" in str(e):
            return closed_error("sqlite")
        if isinstance(e, sqlite3.IntegrityError):
            return ConflictError(f"{where}: {e}", path=where)
        return StoreError(f"{where}: sqlite error: {e}", path=where, sqlite_error=name)

    def _write(self, op: Callable[[sqlite3.Connection], T]) -> T:
        with self._lock:
            conn = self._conn
            if conn is None:
                raise closed_error("sqlite")
            try:
                conn.execute("BEGIN IMMEDIATE")
                try:
                    result = op(conn)
                    conn.execute("COMMIT")
                except BaseException:
                    if conn.in_transaction:
                        with contextlib.suppress(sqlite3.Error):
                            conn.execute("ROLLBACK")
                    raise
                return result
            except sqlite3.Error as e:
                raise self._translate(e) from e

    def _read(self, op: Callable[[sqlite3.Connection], T]) -> T:
        with self._lock:
            conn = self._conn
            if conn is None:
                raise closed_error("sqlite")
            try:
                return op(conn)
            except sqlite3.Error as e:
                raise self._translate(e) from e

    # --- sessions -------------------------------------------------------------------------

    async def create_session(self, session: Session) -> None:
        check_new_session(session)

        def op(conn: sqlite3.Connection) -> None:
            try:
                conn.execute(_INSERT_SESSION, session_row(session))
            except sqlite3.IntegrityError:
                raise duplicate_session(session.id) from None

        self._write(op)

    async def get_session(self, session_id: str) -> Session:
        row = self._read(lambda conn: conn.execute(_GET_SESSION, (session_id,)).fetchone())
        if row is None:
            raise session_not_found(session_id)
        return session_from_row(row)

    async def list_sessions(self, *, limit: int | None = None) -> list[Session]:
        lim = -1 if limit is None else max(limit, 0)
        rows = self._read(lambda conn: conn.execute(_LIST_SESSIONS, (lim,)).fetchall())
        return [session_from_row(r) for r in rows]

    async def read_messages(
        self, session_id: str, *, after: int = 0, limit: int | None = None
    ) -> list[StoredMessage]:
        lim = -1 if limit is None else max(limit, 0)

        def op(conn: sqlite3.Connection) -> list[StoredMessage]:
            rows = conn.execute(_READ_MESSAGES, (session_id, after, lim)).fetchall()
            if not rows and conn.execute(_SESSION_EXISTS, (session_id,)).fetchone() is None:
                raise session_not_found(session_id)
            return decode_messages(rows)

        # Loading history allocates a few objects per message and keeps them all: the cyclic
        # GC would rescan the growing heap several times for nothing (~25% of the load).
        paused = gc.isenabled()
        gc.disable()
        try:
            return self._read(op)
        finally:
            if paused:
                gc.enable()

    # --- writes ---------------------------------------------------------------------------

    async def start_run(self, commit: Commit) -> CommitResult:
        validate_commit(commit, start=True)
        return self._write(lambda conn: self._apply(conn, commit, start=True))

    async def commit(self, commit: Commit) -> CommitResult:
        validate_commit(commit, start=False)
        return self._write(lambda conn: self._apply(conn, commit, start=False))

    def _apply(self, conn: sqlite3.Connection, c: Commit, *, start: bool) -> CommitResult:
        sid = c.session_id
        expected = c.expected_version
        # Under BEGIN IMMEDIATE this connection holds the write lock: check, then write.
        row = conn.execute(_SESSION_VERSION, (sid,)).fetchone()
        if row is None:
            raise session_not_found(sid)
        current, active = row
        run = c.run
        cancel = False
        if start:
            assert run is not None
            if active is not None:
                raise session_busy(sid, active)
            if current != expected:
                raise version_conflict(sid, expected, current)
            lease = run.lease
            inserted = conn.execute(
                _INSERT_RUN,
                (
                    run.id, sid, run.status.value, run.started_at,
                    None if lease is None else lease.owner,
                    None if lease is None else lease.expires_at, run_data(run),
                ),
            ).rowcount  # fmt: skip
            if inserted != 1:
                raise duplicate_run(run.id)
            if not run.status.terminal:
                conn.execute(_CLAIM_SESSION, (run.id, sid))
        else:
            if current != expected:
                raise version_conflict(sid, expected, current)
            if run is not None:
                fence = conn.execute(_RUN_FENCE, (run.id,)).fetchone()
                if fence is None or fence[0] != sid:
                    raise run_not_found(run.id)
                lease = resolve_lease(run.id, fence[1], fence[2], run, c.lease_owner)
                cancel = bool(fence[3])
                conn.execute(
                    _UPDATE_RUN,
                    (
                        run.status.value, run.started_at,
                        None if lease is None else lease.owner,
                        None if lease is None else lease.expires_at, run_data(run), run.id,
                    ),
                )  # fmt: skip
                if run.status.terminal and active == run.id:
                    conn.execute(_RELEASE_SESSION, (sid, run.id))
            elif active is not None:
                flag = conn.execute(_RUN_CANCEL_FLAG, (active,)).fetchone()
                cancel = flag is not None and bool(flag[0])
        if c.executions:
            self._put_executions(conn, c, run)
        if c.messages:
            self._put_messages(conn, sid, expected, c.messages)
        return CommitResult(expected + len(c.messages), cancel)

    def _put_executions(self, conn: sqlite3.Connection, c: Commit, run: Run | None) -> None:
        sid = c.session_id
        for rec in c.executions:
            row = conn.execute(_GET_EXECUTION, (sid, rec.run_id, rec.call_id)).fetchone()
            if row is not None:
                check_execution(row[0], _EXEC_STATE[row[1]], rec)
            elif (run is None or run.id != rec.run_id) and conn.execute(
                _RUN_IN_SESSION, (rec.run_id, sid)
            ).fetchone() is None:
                raise run_not_found(rec.run_id)
        conn.executemany(_UPSERT_EXECUTION, [execution_row(e) for e in c.executions])

    def _put_messages(
        self, conn: sqlite3.Connection, sid: str, expected: int, messages: tuple[Message, ...]
    ) -> None:
        members = []
        for seq, m in enumerate(messages, expected + 1):
            pk = conn.execute(_INSERT_MESSAGE, message_row(m)).lastrowid
            members.append((sid, seq, m.id, pk))
        try:
            conn.executemany(_INSERT_MEMBER, members)
        except sqlite3.IntegrityError:
            seen: set[str] = set()
            for m in messages:
                if m.id in seen or conn.execute(_IS_MEMBER, (sid, m.id)).fetchone():
                    raise duplicate_message(sid, m.id) from None
                seen.add(m.id)
            raise

    # --- forks (see _sqlite_fork) ---------------------------------------------------------

    async def message_seq(self, session_id: str, message_id: str) -> int | None:
        return self._read(lambda conn: _sqlite_fork.message_seq(conn, session_id, message_id))

    async def fork_session(self, commit: ForkCommit) -> ForkRecord:
        return self._write(lambda conn: _sqlite_fork.fork(conn, commit))

    async def get_fork_record(self, session_id: str) -> ForkRecord | None:
        return self._read(lambda conn: _sqlite_fork.get_record(conn, session_id))

    # --- runs -----------------------------------------------------------------------------

    async def get_run(self, run_id: str) -> Run:
        row = self._read(lambda conn: conn.execute(_GET_RUN, (run_id,)).fetchone())
        if row is None:
            raise run_not_found(run_id)
        return run_from_row(row)

    async def list_runs(self, *, session_id: str | None = None) -> list[Run]:
        def op(conn: sqlite3.Connection) -> list[tuple[Any, ...]]:
            if session_id is None:
                return conn.execute(_LIST_RUNS).fetchall()
            rows = conn.execute(_LIST_SESSION_RUNS, (session_id,)).fetchall()
            if not rows and conn.execute(_SESSION_EXISTS, (session_id,)).fetchone() is None:
                raise session_not_found(session_id)
            return rows

        return [run_from_row(r) for r in self._read(op)]

    async def request_cancel(self, run_id: str) -> Run:
        rows = self._write(lambda conn: conn.execute(_CANCEL, (run_id,)).fetchall())
        if not rows:
            raise run_not_found(run_id)
        return run_from_row(rows[0])

    async def get_executions(self, run_id: str) -> list[ExecutionRecord]:
        def op(conn: sqlite3.Connection) -> list[tuple[Any, ...]]:
            rows = conn.execute(_LIST_EXECUTIONS, (run_id, run_id)).fetchall()
            if not rows and conn.execute(_LEASE, (run_id,)).fetchone() is None:
                raise run_not_found(run_id)
            return rows

        return [
            _codec.execution_from_dict(json_value(r[0], "execution record")) for r in self._read(op)
        ]

    async def claim_run(self, run_id: str, *, owner: str, now: float, expires_at: float) -> Run:
        def op(conn: sqlite3.Connection) -> tuple[Any, ...]:
            rows = conn.execute(_CLAIM, (owner, expires_at, run_id, now, owner)).fetchall()
            if rows:
                return tuple(rows[0])
            self._lease_failure(conn, run_id, owner)
            raise AssertionError("unreachable")

        return run_from_row(self._write(op))

    async def renew_lease(self, run_id: str, *, owner: str, expires_at: float) -> None:
        def op(conn: sqlite3.Connection) -> None:
            if conn.execute(_RENEW, (expires_at, run_id, owner)).rowcount != 1:
                self._lease_failure(conn, run_id, owner)

        self._write(op)

    def _lease_failure(self, conn: sqlite3.Connection, run_id: str, owner: str) -> None:
        row = conn.execute(_LEASE, (run_id,)).fetchone()
        if row is None:
            raise run_not_found(run_id)
        raise lease_lost(run_id, row[0], row[1], wanted=owner)

    async def list_stale_runs(self, *, now: float) -> list[Run]:
        return [
            run_from_row(r)
            for r in self._read(lambda conn: conn.execute(_STALE, (now,)).fetchall())
        ]

    # --- artifacts ------------------------------------------------------------------------

    async def put_artifact(self, data: bytes, *, media_type: str) -> ArtifactRef:
        ref = artifact_ref(data, media_type)
        row = (ref.id, ref.sha256, ref.size, ref.media_type, bytes(data))
        self._write(lambda conn: conn.execute(_PUT_ARTIFACT, row))
        return ref

    async def put_artifact_file(self, path: str, *, media_type: str) -> ArtifactRef:
        """Streams the file into the blob in chunks (never whole in memory)."""
        ref = artifact_ref_of_file(path, media_type)

        def put(conn: sqlite3.Connection) -> None:
            row = (ref.id, ref.sha256, ref.size, ref.media_type, ref.size)
            cur = conn.execute(_PUT_ARTIFACT_SIZED, row)
            if cur.rowcount == 0:
                return  # already stored
            rowid = conn.execute("SELECT rowid FROM artifacts WHERE id = ?", (ref.id,)).fetchone()
            with open(path, "rb") as src, conn.blobopen("artifacts", "data", rowid[0]) as blob:
                while chunk := src.read(ARTIFACT_CHUNK):
                    blob.write(chunk)

        self._write(put)
        return ref

    async def get_artifact(self, artifact_id: str) -> tuple[ArtifactRef, bytes]:
        row = self._read(lambda conn: conn.execute(_GET_ARTIFACT, (artifact_id,)).fetchone())
        if row is None:
            raise artifact_not_found(artifact_id)
        aid, sha, size, media_type, data = row
        return ArtifactRef(id=aid, sha256=sha, size=size, media_type=media_type), bytes(data)

    # --- service mode: queue, events, keys (see _sqlite_service) --------------------------

    async def claim_queued_run(self, *, owner: str, now: float, expires_at: float) -> Run | None:
        row = self._write(lambda c: _service.claim_queued(c, _RUN_COLS, owner, now, expires_at))
        return None if row is None else run_from_row(row)

    async def append_run_events(
        self, run_id: str, events: Sequence[NewRunEvent]
    ) -> list[RunEventRecord]:
        if not events:
            return []
        return self._write(lambda conn: _service.append_events(conn, run_id, events))

    async def read_run_events(
        self, run_id: str, *, after: int = 0, limit: int | None = None
    ) -> list[RunEventRecord]:
        return self._read(lambda conn: _service.read_events(conn, run_id, after, limit))

    async def add_api_key(self, key: ApiKey) -> None:
        self._write(lambda conn: _service.add_key(conn, key))

    async def find_api_key(self, key_hash: str) -> ApiKey | None:
        return self._read(lambda conn: _service.find_key(conn, key_hash))

    # --- approvals (rules in _approvals, SQL in _approvals_sqlite) -------------------------

    async def request_approval(self, approval: Approval) -> Approval:
        def op(conn: sqlite3.Connection) -> Approval:
            if conn.execute(_SESSION_EXISTS, (approval.session_id,)).fetchone() is None:
                raise session_not_found(approval.session_id)
            return _approvals_sqlite.request(conn, approval)

        return self._write(op)

    async def get_approval(self, approval_id: str) -> Approval:
        return self._read(lambda conn: _approvals_sqlite.get(conn, approval_id))

    async def list_approvals(
        self, *, session_id: str | None = None, run_id: str | None = None
    ) -> list[Approval]:
        return self._read(lambda conn: _approvals_sqlite.listing(conn, session_id, run_id))

    async def decide_approval(
        self,
        approval_id: str,
        *,
        approve: bool,
        grantor: str,
        at: float,
        ttl_seconds: float | None = None,
        reason: str | None = None,
    ) -> Approval:
        return self._write(
            lambda conn: _approvals_sqlite.decide(
                conn, approval_id, approve=approve, grantor=grantor, at=at,
                ttl_seconds=ttl_seconds, reason=reason,
            )
        )  # fmt: skip

    async def consume_approval(self, approval_id: str, use: ApprovalUse) -> Approval:
        return self._write(lambda conn: _approvals_sqlite.consume(conn, approval_id, use))

    # --- summaries, constraints, search (see _sqlite_summaries) ----------------------------

    async def activate_summary(self, summary: Summary, *, expected_generation: int) -> None:
        self._write(lambda conn: _summaries.activate(conn, summary, expected_generation))

    async def get_summary(self, session_id: str) -> Summary | None:
        return self._read(lambda conn: _summaries.get_active(conn, session_id))

    async def list_summaries(self, session_id: str) -> list[Summary]:
        return self._read(lambda conn: _summaries.list_summaries(conn, session_id))

    async def add_constraints(
        self, session_id: str, constraints: Sequence[Constraint]
    ) -> list[Constraint]:
        items = list(constraints)
        return self._write(lambda conn: _summaries.add_constraints(conn, session_id, items))

    async def list_constraints(self, session_id: str) -> list[Constraint]:
        return self._read(lambda conn: _summaries.list_constraints(conn, session_id))

    async def search_history(
        self, session_id: str, query: str, *, through_seq: int | None = None, limit: int = 20
    ) -> list[StoredMessage]:
        search_terms(query)  # a bad query fails before anything is written
        self._write(_summaries.catch_up_index)
        return self._read(
            lambda conn: _summaries.search(conn, session_id, query, through_seq, max(limit, 0))
        )

    async def close(self) -> None:
        with self._lock:
            conn, self._conn = self._conn, None
            if conn is not None:
                try:
                    conn.close()
                except sqlite3.Error as e:
                    raise self._translate(e) from e
