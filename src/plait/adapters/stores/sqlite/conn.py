"""The SQLite store's one connection: opening it (schema created or checked, WAL,
``synchronous=FULL``), its transactions, and the translation of every ``sqlite3``
exception at this edge (locked → ConflictError, corrupt or not a database →
CorruptStoreError naming the file, disk full or an I/O error → StoreUnavailableError,
anything else → StoreError).

Every write is exactly one ``BEGIN IMMEDIATE … COMMIT`` transaction; reads run without an
explicit transaction. In a process serving several runs (``io="thread"``) both run on the
store's own I/O thread (:class:`~plait.adapters.stores.shared.offload.IoThread`), never on
the event loop's: a commit's fsync blocks nobody but the next call to this store. In a
process driving one run (``io="inline"``) they run at once on the caller's thread: no
round trip per call (see :data:`~plait.adapters.stores.shared.offload.IoMode`). A lock
serializes the callers (one thread at a time, but the connection must stay safe whoever
calls).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sqlite3
import threading
import time
import urllib.parse
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from plait.adapters.stores.shared.closed import closed_error
from plait.adapters.stores.shared.health import CommitHealth
from plait.adapters.stores.shared.inbox_pages import WAITING
from plait.adapters.stores.shared.offload import IoMode, io_for
from plait.adapters.stores.shared.unstorable import unstorable
from plait.adapters.stores.sqlite.segments import DDL as SEGMENTS_DDL
from plait.domain.errors import (
    ConflictError,
    CorruptStoreError,
    PlaitError,
    StoreError,
    StoreUnavailableError,
)
from plait.domain.run_status import RunStatus

__all__ = [
    "GET_SESSION",
    "LIVE",
    "RUN_COLS",
    "SCHEMA_VERSION",
    "SESSION_COLS",
    "VERSION_OF",
    "SqliteConnection",
]

OWNER_INDEX_SQLITE = "CREATE INDEX IF NOT EXISTS sessions_by_owner ON sessions (owner, created_at)"
"""SQLite appends the rowid to every index entry: (owner, created_at, rowid) in order."""
RUNS_WAITING_SQLITE = (
    "CREATE INDEX IF NOT EXISTS runs_waiting ON runs (status, started_at) "
    f"WHERE status IN ({WAITING})"
)
"""Only runs that wait for a person are in it, in page order (rowid appended)."""

SCHEMA_VERSION = 4
"""Version of the table layout, kept in ``meta``. Row shapes carry their own version.
2: ``runs.lease_token`` (fencing); 3: ``session_segments`` (forks that do not copy, see
:mod:`.segments`; branches made before hold copied rows and stay readable); 4:
``sessions.model`` (the model a session remembers). An older store is upgraded when it is
opened."""

T = TypeVar("T")

MMAP_BYTES = 256 * 1024 * 1024
"""How much of the database file SQLite reads through a memory map (``PRAGMA mmap_size``)
instead of copying each page into its cache: a page is then read where the OS keeps it,
and the kernel maps the pages around it in the same fault. Reading a 5,000-message
history takes ~1,000 page faults fewer. Writes are unchanged (the WAL is written with
``write`` and fsynced as before). An I/O error of the disk while a mapped page is read
stops the process (SIGBUS) instead of failing the statement: the store is left as the
last commit left it, and the next process recovers from there."""

_UNAVAILABLE = ("SQLITE_FULL", "SQLITE_IOERR", "SQLITE_CANTOPEN")
"""Transient failures of the file system under the store: disk full, I/O error, a
file that cannot be opened (e.g. the WAL index when no space is left)."""

LIVE = ", ".join(f"'{s.value}'" for s in RunStatus if not s.terminal)

_DDL = (
    "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID",
    # No version column: a session's version is its highest seq, so appending a message
    # writes no session row (one page less per commit); the (session_id, seq) key makes a
    # second writer at the same version fail instead of interleaving.
    """CREATE TABLE IF NOT EXISTS sessions (
        id TEXT PRIMARY KEY, created_at REAL NOT NULL, owner TEXT, workspace TEXT,
        active_run_id TEXT, parent_session_id TEXT, fork_point_message_id TEXT, title TEXT,
        model TEXT)""",
    "CREATE INDEX IF NOT EXISTS sessions_by_created ON sessions (created_at)",
    OWNER_INDEX_SQLITE,
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
        cancel_requested INTEGER NOT NULL DEFAULT 0, data TEXT NOT NULL,
        lease_token INTEGER NOT NULL DEFAULT 0)""",
    "CREATE INDEX IF NOT EXISTS runs_by_session ON runs (session_id, started_at)",
    "CREATE INDEX IF NOT EXISTS runs_by_started ON runs (started_at)",
    # On status, not on the lease: renewing a lease must not rewrite an index page.
    f"CREATE INDEX IF NOT EXISTS runs_live ON runs (status) WHERE status IN ({LIVE})",
    RUNS_WAITING_SQLITE,
    """CREATE TABLE IF NOT EXISTS executions (
        session_id TEXT NOT NULL, run_id TEXT NOT NULL, call_id TEXT NOT NULL,
        state TEXT NOT NULL, args_digest TEXT NOT NULL, data TEXT NOT NULL,
        PRIMARY KEY (session_id, run_id, call_id))""",
    """CREATE TABLE IF NOT EXISTS artifacts (
        id TEXT PRIMARY KEY, sha256 TEXT NOT NULL, size INTEGER NOT NULL,
        media_type TEXT NOT NULL, data BLOB NOT NULL)""",
    SEGMENTS_DDL,
)
VERSION_OF = (
    "coalesce((SELECT max(seq) FROM session_messages WHERE session_id = s.id), "
    "(SELECT max(hi) FROM session_segments WHERE session_id = s.id AND owner_id <> s.id), 0)"
)
"""A session's version: its highest seq (no version column; see ``sessions``); a branch
without messages of its own yet: its fork point."""
SESSION_COLS = (
    f"s.id, s.created_at, s.owner, s.workspace, {VERSION_OF}, s.active_run_id, "
    "s.parent_session_id, s.fork_point_message_id, s.title, s.model"
)
GET_SESSION = f"SELECT {SESSION_COLS} FROM sessions AS s WHERE s.id = ?"
"""A session's row (``get_session``, and the check of a run's start: one statement)."""
RUN_COLS = (
    "id, session_id, status, started_at, lease_owner, lease_expires_at, cancel_requested, data, "
    "lease_token"
)
_UPGRADES = {
    # 1 -> 2: the runs' fencing token (every claim makes it one higher).
    1: ("ALTER TABLE runs ADD COLUMN lease_token INTEGER NOT NULL DEFAULT 0",),
    # 2 -> 3: where a branch's prefix lives (forks made from now on copy no rows).
    2: (SEGMENTS_DDL,),
    # 3 -> 4: the model a session remembers (`sessions new --model`, its first send).
    3: ("ALTER TABLE sessions ADD COLUMN model TEXT",),
}


def _version(conn: sqlite3.Connection) -> int | None:
    row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    return int(row[0]) if row is not None and str(row[0]).isdigit() else None


class SqliteConnection:
    """One ``sqlite3`` connection to ``path`` and its transactions."""

    def __init__(self, path: Path, busy_timeout_s: float, io: IoMode = "thread") -> None:
        self._path = path
        self._busy_timeout_s = busy_timeout_s
        self._lock = threading.Lock()
        self.health = CommitHealth()
        self.write_seq = 0
        """Write transactions begun on this connection (the one running included)."""
        self.committed_seq = 0
        """The :attr:`write_seq` of the last one that committed."""
        self.io = io_for(io, f"plait-sqlite-{path.name}")
        """Where the calls run (the I/O thread, or inline)."""
        self._io = self.io
        self._io.start()  # it gets going while the file is opened
        try:
            self._conn: sqlite3.Connection | None = self._connect()
        except BaseException:
            self._io.stop()
            raise

    def _read_only_place(self) -> bool:
        """The store exists where nothing can be written (a read-only mount): WAL needs
        its -shm file next to it, so it is opened immutable, for reading only."""
        return (
            str(self._path) != ":memory:"
            and self._path.is_file()
            and not os.access(self._path.parent, os.W_OK)
        )

    def _connect_read_only(self) -> sqlite3.Connection:
        uri = f"file:{urllib.parse.quote(str(self._path.absolute()))}?immutable=1"
        try:
            conn = sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=False)
            conn.execute(f"PRAGMA mmap_size = {MMAP_BYTES}")
            self._check_schema(conn)
        except BaseException as error:
            if isinstance(error, sqlite3.Error):
                raise self.translate(error) from error
            raise
        return conn

    def _connect(self) -> sqlite3.Connection:
        if self._read_only_place():
            return self._connect_read_only()
        try:
            conn = sqlite3.connect(self._path, isolation_level=None, check_same_thread=False)
        except sqlite3.Error as error:
            raise self.translate(error) from error
        try:
            conn.execute(f"PRAGMA busy_timeout = {int(self._busy_timeout_s * 1000)}")
            conn.execute(f"PRAGMA mmap_size = {MMAP_BYTES}")
            # Read before anything writes: a file that is not a database, or a newer
            # schema, must fail here and be left exactly as it was.
            tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
            version = None
            if "meta" in tables:
                version = self._check_schema(conn, older=True)
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
            else:  # an up-to-date store is opened without a write or another read
                if "sessions_by_owner" not in tables:  # added after schema 1 shipped
                    conn.execute(OWNER_INDEX_SQLITE)
                if "runs_waiting" not in tables:
                    conn.execute(RUNS_WAITING_SQLITE)
                if version != SCHEMA_VERSION:
                    self._upgrade(conn)
        except BaseException as error:
            conn.close()
            if isinstance(error, sqlite3.Error):
                raise self.translate(error) from error
            raise
        return conn

    def _check_schema(self, conn: sqlite3.Connection, *, older: bool = False) -> int:
        """A store this plait can open (``older``: or upgrade); else CorruptStoreError.
        Returns its schema version."""
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
        if version != SCHEMA_VERSION and not (older and version in _UPGRADES):
            raise CorruptStoreError(
                f"{self._path} has an unknown store schema_version {row!r}",
                path=str(self._path),
            )
        return version

    def _upgrade(self, conn: sqlite3.Connection) -> None:
        """Bring a store written by an older plait to :data:`SCHEMA_VERSION`, one step per
        transaction (re-read under the write lock: a concurrent opener may have upgraded
        first), and check the result. An up-to-date store takes no lock."""
        while _version(conn) in _UPGRADES:
            conn.execute("BEGIN IMMEDIATE")
            try:
                version = _version(conn)
                steps = None if version is None else _UPGRADES.get(version)
                if version is not None and steps is not None:
                    for statement in steps:
                        conn.execute(statement)
                    conn.execute(
                        "UPDATE meta SET value = ? WHERE key = 'schema_version'",
                        (str(version + 1),),
                    )
                conn.execute("COMMIT")
            except BaseException:
                with contextlib.suppress(sqlite3.Error):
                    conn.execute("ROLLBACK")
                raise
        self._check_schema(conn)

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

    def translate(self, error: sqlite3.Error) -> PlaitError:
        name = getattr(error, "sqlite_errorname", "")
        where = str(self._path)
        if name.startswith(("SQLITE_BUSY", "SQLITE_LOCKED")) or "locked" in str(error):
            return ConflictError(
                f"{where}: another writer held the database for more than "
                f"{self._busy_timeout_s:g} s ({error}); retry the operation",
                path=where,
                busy_timeout_s=self._busy_timeout_s,
            )
        if name.startswith(("SQLITE_CORRUPT", "SQLITE_NOTADB")):
            return CorruptStoreError(
                f"{where} is not a valid plait SQLite store: {error}", path=where
            )
        if isinstance(error, sqlite3.ProgrammingError) and "closed" in str(error):
            return closed_error("sqlite")
        if isinstance(error, sqlite3.IntegrityError):
            return ConflictError(f"{where}: {error}", path=where)
        if name.startswith("SQLITE_READONLY") or (
            name.startswith("SQLITE_CANTOPEN") and self._read_only_place()
        ):
            return StoreError(
                f"{where} is on a read-only location: it can be read (sessions list, history, "
                f"runs show...), not written ({error})",
                path=where,
                sqlite_error=name,
            )
        if name.startswith(_UNAVAILABLE):
            return StoreUnavailableError(
                f"{where}: the store cannot write for now ({error}); retry later",
                path=where,
                sqlite_error=name,
            )
        return StoreError(f"{where}: sqlite error: {error}", path=where, sqlite_error=name)

    def submit(
        self,
        op: Callable[[sqlite3.Connection], T],
        *,
        after: Callable[[], None] | None = None,
        hold: bool = False,
    ) -> asyncio.Future[T]:
        """Queue a write transaction on the I/O thread now (inline: run it now); its
        future resolves once it is committed (durable) or has failed. ``after`` runs where
        the write ran, once it is committed; ``hold``: see :meth:`IoThread.submit`."""
        if after is None:
            return self._io.submit(lambda: self._write(op), hold=hold)

        def write_then() -> T:
            result = self._write(op)
            after()
            return result

        return self._io.submit(write_then, hold=hold)

    async def write(self, op: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``op`` in one write transaction on the I/O thread."""
        return await self._io.submit(lambda: self._write(op))

    async def read(self, op: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``op`` (no explicit transaction) on the I/O thread."""
        return await self._io.submit(lambda: self._read(op))

    async def check_writable(self) -> None:
        """Raise :class:`StoreUnavailableError` unless the store can commit now: a recent
        commit failed that way (see :class:`CommitHealth`), or a probe commit fails."""
        self.health.check()

        def probe(conn: sqlite3.Connection) -> None:
            conn.execute(
                "INSERT INTO meta (key, value) VALUES ('ready_probe', ?) "
                "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                (repr(time.time()),),
            )

        await self.write(probe)

    async def close(self) -> None:
        try:
            await self._io.run(self._close)
        finally:
            self._io.stop()

    def _write(self, op: Callable[[sqlite3.Connection], T]) -> T:
        with self._lock:
            conn = self._conn
            if conn is None:
                raise closed_error("sqlite")
            changes = conn.total_changes
            self.write_seq += 1
            seq = self.write_seq
            try:
                conn.execute("BEGIN IMMEDIATE")
                try:
                    result = op(conn)
                    conn.execute("COMMIT")
                    self.committed_seq = seq
                except BaseException:
                    if conn.in_transaction:
                        with contextlib.suppress(sqlite3.Error):
                            conn.execute("ROLLBACK")
                    raise
            except sqlite3.Error as cause:
                error = self.translate(cause)
                if isinstance(error, StoreUnavailableError):
                    self.health.failed(error)
                raise error from cause
            except UnicodeEncodeError as error:
                raise unstorable(error, str(self._path)) from error
            if conn.total_changes != changes:  # a commit that wrote: the disk took it
                self.health.succeeded()
            return result

    def _read(self, op: Callable[[sqlite3.Connection], T]) -> T:
        with self._lock:
            conn = self._conn
            if conn is None:
                raise closed_error("sqlite")
            try:
                return op(conn)
            except sqlite3.Error as error:
                raise self.translate(error) from error
            except UnicodeEncodeError as error:
                raise unstorable(error, str(self._path)) from error

    def _close(self) -> None:
        with self._lock:
            conn, self._conn = self._conn, None
            if conn is not None:
                try:
                    conn.close()
                except sqlite3.Error as error:
                    raise self.translate(error) from error
