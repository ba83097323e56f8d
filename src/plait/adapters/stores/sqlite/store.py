"""The embedded default store: one SQLite file in WAL mode with ``synchronous=FULL``.

Every port write is exactly one ``BEGIN IMMEDIATE … COMMIT`` transaction (durable when the
call returns; see :mod:`.conn`, and :mod:`.commit` for a commit's checks);
reads run without an explicit transaction. With ``io="thread"`` (the default, and what
``plait serve`` and workers use) every call runs on the store's own I/O thread, never on
the event loop thread: one slow fsync never stalls the other sessions or the lease
heartbeats of the process. With ``io="inline"`` (a process driving one run: the CLI, the
Python API) every call runs at once on the caller's thread, without the round trip
between threads that would otherwise cost more than the rest of a step (see
:data:`~plait.adapters.stores.shared.offload.IoMode`). Calls run one at a time in the
order they were made; :meth:`SqliteStore.
commit_soon` queues a commit at once and returns its future, for a caller that has other
work to do while the commit becomes durable. No transaction is ever held open across an
``await``.

Several processes may share the file: ``PRAGMA busy_timeout`` makes a writer wait for the
write lock instead of failing; the version compare-and-set inside the transaction turns a
lost race into :class:`~plait.domain.errors.ConflictError`, never an interleaving. Every
``sqlite3`` exception is translated at this edge (locked → ConflictError, corrupt or not a
database → CorruptStoreError naming the file, disk full or an I/O error →
StoreUnavailableError, anything else → StoreError).
The table layout is in :mod:`.conn`.

Messages live in columns, not JSON blobs, because loading history is the hot read path:
``extra`` holds compact JSON only for the sparse parts (tool calls, usage, vendor state,
reason, artifact). Bodies are keyed by message id and joined through ``session_messages``
so forks can share them.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from plait._gc import long_lived
from plait.adapters.stores.shared.inbox_pages import waiting_runs_sql
from plait.adapters.stores.shared.later import Later
from plait.adapters.stores.shared.offload import InlineIo, IoMode, IoThread
from plait.adapters.stores.sqlite import segments, tokens
from plait.adapters.stores.sqlite.conn import (
    GET_SESSION,
    LIVE,
    RUN_COLS,
    SCHEMA_VERSION,
    SESSION_COLS,
    SqliteConnection,
)
from plait.adapters.stores.sqlite.context import ContextCache, data_version, read_context
from plait.adapters.stores.sqlite.segments import OPEN_END
from plait.application.ports import CommitResult, StoreCapabilities
from plait.domain.errors import LeaseLostError, StoreError
from plait.domain.run_status import RunStatus

if TYPE_CHECKING:
    from plait.adapters.stores.shared import codec, session_pages, state
    from plait.adapters.stores.shared import rows as shared_rows
    from plait.adapters.stores.sqlite import (
        approvals,
        fork,
        retention,
        service,
        summaries,
        webhooks,
    )
    from plait.adapters.stores.sqlite import commit as _sqlite_commit
    from plait.application.ports import Commit, ForkCommit  # built by the application
    from plait.domain import messages, recall
    from plait.domain.forks import ForkRecord
    from plait.domain.governance import Approval, ApprovalUse
    from plait.domain.messages import ArtifactRef, Message
    from plait.domain.retention import Expiry, Tombstone
    from plait.domain.runs import Run
    from plait.domain.service import ApiKey, NewRunEvent, RunEventRecord
    from plait.domain.session import ExecutionRecord, Session, StoredMessage
    from plait.domain.summary import Constraint, Summary
    from plait.domain.webhooks import (
        Delivery,
        DeliveryAttempt,
        DeliveryJob,
        DeliveryStatus,
        Endpoint,
    )
else:  # what one run does not need is imported at its first use (see shared/later.py)
    # What a store's reads and writes need (its rows, the domain's messages, runs and
    # sessions) is imported at the first read or write, not at open; the first use puts
    # the module in its place here (no detour on later calls).
    codec = Later("plait.adapters.stores.shared.codec", globals(), "codec")
    shared_rows = Later("plait.adapters.stores.shared.rows", globals(), "shared_rows")
    session_pages = Later("plait.adapters.stores.shared.session_pages", globals(), "session_pages")
    state = Later("plait.adapters.stores.shared.state", globals(), "state")
    _sqlite_commit = Later("plait.adapters.stores.sqlite.commit", globals(), "_sqlite_commit")
    messages = Later("plait.domain.messages", globals(), "messages")
    recall = Later("plait.domain.recall", globals(), "recall")
    approvals = Later("plait.adapters.stores.sqlite.approvals")
    fork = Later("plait.adapters.stores.sqlite.fork")
    retention = Later("plait.adapters.stores.sqlite.retention")
    service = Later("plait.adapters.stores.sqlite.service")
    summaries = Later("plait.adapters.stores.sqlite.summaries")  # compaction and recall
    webhooks = Later("plait.adapters.stores.sqlite.webhooks")

__all__ = ["SCHEMA_VERSION", "SqliteStore", "load_deferred"]


def load_deferred() -> None:
    """Import now what this module otherwise imports at a store's first read or write, or
    at a capability's first use: for a process that must not pay those imports later,
    inside a timed window (the benchmarks leave Python imports out of their figures, as
    the peers' drivers, which import their frameworks at the top) or on a request's
    path."""
    for value in list(globals().values()):
        if isinstance(value, Later):
            value.load()


_SESSION_COLS = SESSION_COLS
_GET_SESSION = GET_SESSION
_MESSAGE_COLS = (
    "m.kind, m.id, m.text, m.created_at, m.run_id, m.step, m.call_id, m.name, m.status, "
    "m.extra, m.schema_version"
)
_READ_MESSAGES = (
    f"SELECT sm.seq, {_MESSAGE_COLS} FROM session_messages AS sm "
    "JOIN messages AS m ON m.pk = sm.message_pk "
    "WHERE sm.session_id = ? AND sm.seq > ? AND sm.seq <= ? ORDER BY sm.seq LIMIT ?"
)
_SESSION_EXISTS = "SELECT 1 FROM sessions WHERE id = ?"

_GET_RUN = f"SELECT {RUN_COLS} FROM runs WHERE id = ?"
_LIST_RUNS = f"SELECT {RUN_COLS} FROM runs ORDER BY started_at DESC, rowid DESC"
_LIST_SESSION_RUNS = (
    f"SELECT {RUN_COLS} FROM runs WHERE session_id = ? ORDER BY started_at DESC, rowid DESC"
)
_CANCEL = f"UPDATE runs SET cancel_requested = 1 WHERE id = ? RETURNING {RUN_COLS}"
_CLAIM = (
    "UPDATE runs SET lease_owner = ?, lease_expires_at = ?, lease_token = lease_token + 1 "
    f"WHERE id = ? AND status IN ({LIVE})"
    f" AND (lease_owner IS NULL OR lease_expires_at <= ? OR lease_owner = ?) RETURNING {RUN_COLS}"
)
_RENEW = (
    "UPDATE runs SET lease_expires_at = ? WHERE id = ? AND lease_owner = ? "
    "AND (? IS NULL OR lease_token = ?)"
)
_LEASE = "SELECT lease_owner, lease_expires_at, lease_token, status FROM runs WHERE id = ?"
_STALE = (
    f"SELECT {RUN_COLS} FROM runs WHERE status IN ({LIVE}) AND (? IS NULL OR status = ?) "
    "AND (lease_owner IS NULL OR lease_expires_at <= ?) ORDER BY started_at, rowid"
)

_LEASED = (
    f"SELECT {RUN_COLS} FROM runs WHERE status IN ({LIVE}) AND (? IS NULL OR status = ?) "
    "AND lease_owner IS NOT NULL AND lease_expires_at > ? ORDER BY started_at, rowid"
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


def _history_rows(conn: sqlite3.Connection, session_id: str, after: int, lim: int) -> list[Any]:
    """The rows of the session's messages after seq ``after``, at most ``lim`` (-1: all),
    from each segment of its history in turn."""
    rows: list[Any] = []
    for owner, lo, hi in segments.ranges(conn, session_id, after):
        want = -1 if lim < 0 else lim - len(rows)
        if want == 0:
            break
        rows += conn.execute(_READ_MESSAGES, (owner, lo - 1, hi, want)).fetchall()
    return rows


# --- the store ----------------------------------------------------------------------------


class SqliteStore:
    """:class:`~plait.application.ports.SessionStore` and
    :class:`~plait.application.ports.ArtifactStore` on one SQLite file; what else it
    keeps is in :attr:`capabilities`."""

    capabilities = StoreCapabilities.all_but(
        "starting_queue", "presence", "carried_events", "reserves_connections"
    )

    def __init__(
        self, path: str | Path, *, busy_timeout_s: float = 10.0, io: IoMode = "thread"
    ) -> None:
        self._path = Path(path)
        self._db = SqliteConnection(self._path, busy_timeout_s, io)
        self._contexts = ContextCache()
        self._last: tuple[tuple[str, str, int, int], _sqlite_commit.Checked] | None = None
        """What this connection's last commit left in the rows a commit is checked
        against, with when (session, run, write_seq, data_version): see :meth:`_apply`."""

    @classmethod
    def open(
        cls, path: str | Path, *, busy_timeout_s: float = 10.0, io: IoMode = "thread"
    ) -> SqliteStore:
        """Open (creating the file and its parent directories when missing). ``io``: where
        its calls run (see the module's docstring)."""
        path = Path(path)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise StoreError(
                f"cannot create the directory of {path}: {error}", path=str(path)
            ) from error
        return cls(path, busy_timeout_s=busy_timeout_s, io=io)

    io_off_loop = True
    """It needs no :class:`~plait.adapters.stores.shared.offload.Offloaded` wrapper: its
    calls run where its ``io`` mode says."""

    @property
    def io(self) -> IoThread | InlineIo:
        """Where its calls run."""
        return self._db.io

    def __repr__(self) -> str:
        return f"SqliteStore({str(self._path)!r})"

    @property
    def path(self) -> Path:
        return self._path

    # --- sessions -------------------------------------------------------------------------

    async def create_session(self, session: Session) -> None:
        state.check_new_session(session)
        await self._db.write(lambda conn: _sqlite_commit.insert_session(conn, session))

    async def get_session(self, session_id: str) -> Session:
        row = await self._db.read(lambda conn: conn.execute(_GET_SESSION, (session_id,)).fetchone())
        if row is None:
            raise state.session_not_found(session_id)
        return shared_rows.session_from_row(row)

    async def list_sessions(
        self, *, limit: int | None = None, owner: str | None = None, before: str | None = None
    ) -> list[Session]:
        lim = -1 if limit is None else max(limit, 0)
        sql, args = session_pages.session_page_sql(
            _SESSION_COLS, "rowid", "?", owner=owner, before=before, limit=lim
        )

        def op(conn: sqlite3.Connection) -> list[Any]:
            if before is not None and conn.execute(_SESSION_EXISTS, (before,)).fetchone() is None:
                raise state.session_not_found(before)
            return conn.execute(sql, args).fetchall()

        return [shared_rows.session_from_row(r) for r in await self._db.read(op)]

    async def read_messages(
        self, session_id: str, *, after: int = 0, limit: int | None = None
    ) -> list[StoredMessage]:
        lim = -1 if limit is None else max(limit, 0)

        def op(conn: sqlite3.Connection) -> list[StoredMessage]:
            with long_lived():  # a few objects per message, all kept
                rows = _history_rows(conn, session_id, after, lim)
                if not rows and conn.execute(_SESSION_EXISTS, (session_id,)).fetchone() is None:
                    raise state.session_not_found(session_id)
                return shared_rows.decode_messages(rows)

        return await self._db.read(op)

    async def read_history(self, session_id: str) -> tuple[Session, list[Message]]:
        """The session and its whole history from one snapshot, in one call to the
        connection (see :class:`~plait.application.ports.HistoryRead`)."""

        def op(conn: sqlite3.Connection) -> tuple[Session, list[Message]]:
            conn.execute("BEGIN")
            try:
                row = conn.execute(_GET_SESSION, (session_id,)).fetchone()
                if row is None:
                    raise state.session_not_found(session_id)
                session = shared_rows.session_from_row(row)
                if session.version == 0:  # no message (a branch's version counts its prefix)
                    return session, []
                with long_lived():  # a few objects per message, all kept
                    if session.fork_origin is None:  # not a branch: no segments, its own rows
                        # decoded as they are stepped through: no list of row tuples,
                        # each row's tuple freed (and its memory reused) at the next
                        rows = conn.execute(_READ_MESSAGES, (session_id, 0, OPEN_END, -1))
                        return session, shared_rows.decode_history(rows)
                    return session, shared_rows.decode_history(
                        _history_rows(conn, session_id, 0, -1)
                    )
            finally:
                conn.execute("COMMIT")

        return await self._db.read(op)

    # --- writes ---------------------------------------------------------------------------

    async def start_run(self, commit: Commit) -> CommitResult:
        state.validate_commit(commit, start=True)
        return await self._db.write(lambda conn: self._apply(conn, commit, start=True))

    async def commit(self, commit: Commit) -> CommitResult:
        return await self.commit_soon(commit)

    def commit_soon(
        self, commit: Commit, *, after: Callable[[], None] | None = None, hold: bool = False
    ) -> asyncio.Future[CommitResult]:
        """:meth:`commit`, queued at once (on the I/O thread, or run now inline): the
        future resolves when the commit is durable (or fails). Calls made after it are
        applied after it. See :class:`~plait.application.ports.QueuedCommits` for
        ``after`` and ``hold``."""
        state.validate_commit(commit, start=False)
        return self._db.submit(lambda conn: self._apply(conn, commit), after=after, hold=hold)

    def _apply(
        self, conn: sqlite3.Connection, commit: Commit, *, start: bool = False
    ) -> CommitResult:
        """On the I/O thread, in the commit's transaction (which holds the write lock).

        A run's commits are checked against the session's version and the run's row
        (lease, fencing token, status). What this connection's last commit left there is
        kept, and used instead of reading it again when it is certainly still so: that
        commit was the last write transaction of this connection and it committed
        (:attr:`SqliteConnection.write_seq`), and no other connection has committed since
        (``PRAGMA data_version`` is unchanged; it changes with every other connection's
        commit, here under the write lock). Any other write of this store (a lease
        renewal, a cancel, a claim) or of another process makes the next commit read."""
        version = data_version(conn)
        self._contexts.version = version
        rid = _sqlite_commit.checked_run(commit)
        last, self._last = self._last, None
        known = None
        if (
            last is not None
            and rid is not None
            and last[0] == (commit.session_id, rid, self._db.write_seq - 1, version)
            and self._db.committed_seq == self._db.write_seq - 1
        ):
            known = last[1]
        result, after = _sqlite_commit.apply(conn, commit, start=start, known=known)
        if rid is not None:
            self._last = ((commit.session_id, rid, self._db.write_seq, version), after)
        return result

    # --- retention (see retention) --------------------------------------------------------

    async def expire_messages(self, session_id: str, tombstones: Sequence[Tombstone]) -> list[str]:
        return await self._db.write(lambda conn: retention.expire(conn, session_id, tombstones))

    async def restore_messages(self, session_id: str, messages: Sequence[Message]) -> list[str]:
        return await self._db.write(lambda conn: retention.restore(conn, session_id, messages))

    async def expiries(self, session_id: str) -> dict[str, Expiry]:
        return await self._db.read(lambda conn: retention.expiries(conn, session_id))

    # --- token counts (see tokens) --------------------------------------------------------

    async def read_token_counts(self, session_id: str, meter: str) -> dict[str, int]:
        return await self._db.read(lambda conn: tokens.read(conn, session_id, meter))

    async def save_token_counts(
        self, session_id: str, meter: str, counts: Mapping[str, int]
    ) -> None:
        if counts:
            await self._db.write(lambda conn: tokens.save(conn, session_id, meter, counts))

    # --- forks (see fork) -----------------------------------------------------------------

    async def message_seq(self, session_id: str, message_id: str) -> int | None:
        return await self._db.read(lambda conn: fork.message_seq(conn, session_id, message_id))

    async def fork_session(self, commit: ForkCommit) -> ForkRecord:
        return await self._db.write(lambda conn: fork.fork(conn, commit))

    async def get_fork_record(self, session_id: str) -> ForkRecord | None:
        return await self._db.read(lambda conn: fork.get_record(conn, session_id))

    # --- runs -----------------------------------------------------------------------------

    async def get_run(self, run_id: str) -> Run:
        row = await self._db.read(lambda conn: conn.execute(_GET_RUN, (run_id,)).fetchone())
        if row is None:
            raise state.run_not_found(run_id)
        return shared_rows.run_from_row(row)

    async def list_runs(self, *, session_id: str | None = None) -> list[Run]:
        def op(conn: sqlite3.Connection) -> list[tuple[Any, ...]]:
            if session_id is None:
                return conn.execute(_LIST_RUNS).fetchall()
            rows = conn.execute(_LIST_SESSION_RUNS, (session_id,)).fetchall()
            if not rows and conn.execute(_SESSION_EXISTS, (session_id,)).fetchone() is None:
                raise state.session_not_found(session_id)
            return rows

        return [shared_rows.run_from_row(r) for r in await self._db.read(op)]

    async def list_waiting_runs(
        self,
        status: RunStatus,
        *,
        owner: str | None = None,
        before: str | None = None,
        limit: int | None = None,
    ) -> list[Run]:
        """Runs in ``status`` (one not ended), newest first, of sessions owned by ``owner``
        (``None``: everyone's); ``before``: the previous page's last run id."""
        lim = -1 if limit is None else max(limit, 0)
        sql, args = waiting_runs_sql(
            RUN_COLS,
            "rowid",
            "?",
            status=status,
            owner=owner,
            before=before,
            limit=lim,
        )

        def op(conn: sqlite3.Connection) -> list[tuple[Any, ...]]:
            if before is not None and conn.execute(_GET_RUN, (before,)).fetchone() is None:
                raise state.run_not_found(before)
            return conn.execute(sql, args).fetchall()

        return [shared_rows.run_from_row(r) for r in await self._db.read(op)]

    async def request_cancel(self, run_id: str) -> Run:
        rows = await self._db.write(lambda conn: conn.execute(_CANCEL, (run_id,)).fetchall())
        if not rows:
            raise state.run_not_found(run_id)
        return shared_rows.run_from_row(rows[0])

    async def get_executions(self, run_id: str) -> list[ExecutionRecord]:
        def op(conn: sqlite3.Connection) -> list[tuple[Any, ...]]:
            rows = conn.execute(_LIST_EXECUTIONS, (run_id, run_id)).fetchall()
            if not rows and conn.execute(_LEASE, (run_id,)).fetchone() is None:
                raise state.run_not_found(run_id)
            return rows

        rows = await self._db.read(op)
        return [
            codec.execution_from_dict(shared_rows.json_value(r[0], "execution record"))
            for r in rows
        ]

    async def claim_run(self, run_id: str, *, owner: str, now: float, expires_at: float) -> Run:
        def op(conn: sqlite3.Connection) -> tuple[Any, ...]:
            rows = conn.execute(_CLAIM, (owner, expires_at, run_id, now, owner)).fetchall()
            if rows:
                return tuple(rows[0])
            self._lease_failure(conn, run_id, owner)
            raise AssertionError("unreachable")

        return shared_rows.run_from_row(await self._db.write(op))

    async def renew_lease(
        self, run_id: str, *, owner: str, expires_at: float, lease_token: int | None = None
    ) -> None:
        def op(conn: sqlite3.Connection) -> None:
            params = (expires_at, run_id, owner, lease_token, lease_token)
            if conn.execute(_RENEW, params).rowcount != 1:
                self._lease_failure(conn, run_id, owner, lease_token)

        await self._db.write(op)

    def _lease_failure(
        self, conn: sqlite3.Connection, run_id: str, owner: str, lease_token: int | None = None
    ) -> None:
        row = conn.execute(_LEASE, (run_id,)).fetchone()
        if row is None:
            raise state.run_not_found(run_id)
        ended = RunStatus(row[3]).terminal
        state.check_token(run_id, row[2], lease_token, ended=ended, wanted=owner)
        raise state.lease_lost(run_id, row[0], row[1], wanted=owner)

    def _check_token(
        self,
        conn: sqlite3.Connection,
        run_id: str,
        lease_token: int | None,
        *,
        events: bool = False,
    ) -> None:
        """Fencing of a run's writes outside commits (events, approval requests), inside
        their write transaction. A run's last events are written after it ended
        (``events``): only its token counts."""
        if lease_token is None:
            return
        row = conn.execute(_LEASE, (run_id,)).fetchone()
        stored = None if row is None else row[2]
        ended = not events and row is not None and RunStatus(row[3]).terminal
        state.check_token(run_id, stored, lease_token, ended=ended, wanted=None)

    async def list_stale_runs(self, *, now: float, status: RunStatus | None = None) -> list[Run]:
        return await self._runs_by_lease(_STALE, now, status)

    async def list_leased_runs(self, *, now: float, status: RunStatus | None = None) -> list[Run]:
        return await self._runs_by_lease(_LEASED, now, status)

    async def _runs_by_lease(self, sql: str, now: float, status: RunStatus | None) -> list[Run]:
        wanted = None if status is None else status.value
        params = (wanted, wanted, now)
        return [
            shared_rows.run_from_row(r)
            for r in await self._db.read(lambda conn: conn.execute(sql, params).fetchall())
        ]

    # --- artifacts ------------------------------------------------------------------------

    async def put_artifact(self, data: bytes, *, media_type: str) -> ArtifactRef:
        ref = state.artifact_ref(data, media_type)
        row = (ref.id, ref.sha256, ref.size, ref.media_type, bytes(data))
        await self._db.write(lambda conn: conn.execute(_PUT_ARTIFACT, row))
        return ref

    async def put_artifact_file(self, path: str, *, media_type: str) -> ArtifactRef:
        """Streams the file into the blob in chunks (never whole in memory)."""
        ref = state.artifact_ref_of_file(path, media_type)

        def put(conn: sqlite3.Connection) -> None:
            row = (ref.id, ref.sha256, ref.size, ref.media_type, ref.size)
            cur = conn.execute(_PUT_ARTIFACT_SIZED, row)
            if cur.rowcount == 0:
                return  # already stored
            rowid = conn.execute("SELECT rowid FROM artifacts WHERE id = ?", (ref.id,)).fetchone()
            with open(path, "rb") as src, conn.blobopen("artifacts", "data", rowid[0]) as blob:
                while chunk := src.read(state.ARTIFACT_CHUNK):
                    blob.write(chunk)

        await self._db.write(put)
        return ref

    async def get_artifact(self, artifact_id: str) -> tuple[ArtifactRef, bytes]:
        row = await self._db.read(
            lambda conn: conn.execute(_GET_ARTIFACT, (artifact_id,)).fetchone()
        )
        if row is None:
            raise state.artifact_not_found(artifact_id)
        aid, sha, size, media_type, data = row
        return messages.ArtifactRef(id=aid, sha256=sha, size=size, media_type=media_type), bytes(
            data
        )

    # --- webhooks: endpoints and the outbox (see webhooks.py) -----------------------------

    async def add_webhook(self, endpoint: Endpoint) -> None:
        await self._db.write(lambda conn: webhooks.add(conn, endpoint))

    async def put_webhook(self, endpoint: Endpoint) -> None:
        await self._db.write(lambda conn: webhooks.put(conn, endpoint))

    async def list_webhooks(self, *, principal: str | None = None) -> list[Endpoint]:
        return await self._db.read(lambda conn: webhooks.listing(conn, principal))

    async def get_webhook(self, endpoint_id: str) -> Endpoint:
        return await self._db.read(lambda conn: webhooks.get(conn, endpoint_id))

    async def remove_webhook(self, endpoint_id: str) -> None:
        await self._db.write(lambda conn: webhooks.remove(conn, endpoint_id))

    async def resume_webhook(self, endpoint_id: str, *, now: float) -> Endpoint:
        return await self._db.write(lambda conn: webhooks.resume(conn, endpoint_id, now))

    async def list_deliveries(
        self,
        *,
        endpoint_id: str | None = None,
        status: DeliveryStatus | None = None,
        principal: str | None = None,
        limit: int = 100,
    ) -> list[Delivery]:
        return await self._db.read(
            lambda conn: webhooks.deliveries(conn, endpoint_id, status, principal, limit)
        )

    async def claim_deliveries(
        self, *, owner: str, now: float, expires_at: float, limit: int
    ) -> list[DeliveryJob]:
        return await self._db.write(
            lambda conn: webhooks.claim(conn, owner, now, expires_at, limit)
        )

    async def finish_delivery(self, attempt: DeliveryAttempt) -> None:
        await self._db.write(lambda conn: webhooks.finish(conn, attempt))

    # --- service mode: queue, events, keys (see service.py) -------------------------------

    async def claim_queued_run(self, *, owner: str, now: float, expires_at: float) -> Run | None:
        claim = service.claim_queued
        row = await self._db.write(lambda conn: claim(conn, RUN_COLS, owner, now, expires_at))
        return None if row is None else shared_rows.run_from_row(row)

    async def count_queued_runs(self, *, now: float) -> int:
        def count(conn: sqlite3.Connection) -> int:
            return int(conn.execute(service.COUNT_QUEUED, (now,)).fetchone()[0])

        return await self._db.read(count)

    async def append_run_events(
        self, run_id: str, events: Sequence[NewRunEvent], *, lease_token: int | None = None
    ) -> list[RunEventRecord]:
        if not events:
            return []

        def op(conn: sqlite3.Connection) -> list[RunEventRecord]:
            self._check_token(conn, run_id, lease_token, events=True)
            return service.append_events(conn, run_id, events)

        return await self._db.write(op)

    async def append_run_events_batch(
        self,
        batch: Mapping[str, Sequence[NewRunEvent]],
        *,
        lease_tokens: Mapping[str, int] | None = None,
    ) -> dict[str, list[RunEventRecord]]:
        out: dict[str, list[RunEventRecord]] = {run_id: [] for run_id in batch}
        todo = {run_id: events for run_id, events in batch.items() if events}
        token_of = lease_tokens or {}

        def op(conn: sqlite3.Connection) -> dict[str, list[RunEventRecord]]:
            fenced = {
                run_id: events
                for run_id, events in todo.items()
                if self._holds(conn, run_id, token_of.get(run_id))
            }
            return service.append_batch(conn, fenced)

        if todo:
            out.update(await self._db.write(op))
        return out

    def _holds(self, conn: sqlite3.Connection, run_id: str, lease_token: int | None) -> bool:
        try:
            self._check_token(conn, run_id, lease_token, events=True)
        except LeaseLostError:
            return False
        return True

    async def read_run_events(
        self, run_id: str, *, after: int = 0, limit: int | None = None
    ) -> list[RunEventRecord]:
        return await self._db.read(lambda conn: service.read_events(conn, run_id, after, limit))

    async def add_api_key(self, key: ApiKey) -> None:
        await self._db.write(lambda conn: service.add_key(conn, key))

    async def find_api_key(self, key_hash: str) -> ApiKey | None:
        return await self._db.read(lambda conn: service.find_key(conn, key_hash))

    # --- approvals (rules in _approvals, SQL in approvals) --------------------------------

    async def request_approval(
        self, approval: Approval, *, lease_token: int | None = None
    ) -> Approval:
        def op(conn: sqlite3.Connection) -> Approval:
            if conn.execute(_SESSION_EXISTS, (approval.session_id,)).fetchone() is None:
                raise state.session_not_found(approval.session_id)
            self._check_token(conn, approval.run_id, lease_token)
            return approvals.request(conn, approval)

        return await self._db.write(op)

    async def get_approval(self, approval_id: str) -> Approval:
        return await self._db.read(lambda conn: approvals.get(conn, approval_id))

    async def list_approvals(
        self, *, session_id: str | None = None, run_id: str | None = None
    ) -> list[Approval]:
        return await self._db.read(lambda conn: approvals.listing(conn, session_id, run_id))

    async def list_pending_approvals(
        self, *, owner: str | None = None, before: str | None = None, limit: int | None = None
    ) -> list[Approval]:
        """Pending approval requests, newest first, of sessions owned by ``owner``
        (``None``: everyone's); ``before``: the previous page's last approval id."""
        lim = -1 if limit is None else max(limit, 0)
        return await self._db.read(
            lambda conn: approvals.pending(conn, owner=owner, before=before, limit=lim)
        )

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
        return await self._db.write(
            lambda conn: approvals.decide(
                conn,
                approval_id,
                approve=approve,
                grantor=grantor,
                at=at,
                ttl_seconds=ttl_seconds,
                reason=reason,
            )
        )

    async def consume_approval(self, approval_id: str, use: ApprovalUse) -> Approval:
        return await self._db.write(lambda conn: approvals.consume(conn, approval_id, use))

    # --- summaries, constraints, search (see summaries.py) --------------------------------

    async def activate_summary(self, summary: Summary, *, expected_generation: int) -> None:
        self._contexts.forget(summary.session_id)
        try:
            await self._db.write(
                lambda conn: summaries.activate(conn, summary, expected_generation)
            )
        finally:
            self._contexts.forget(summary.session_id)

    async def get_summary(self, session_id: str) -> Summary | None:
        return await self._db.read(lambda conn: summaries.get_active(conn, session_id))

    async def list_summaries(self, session_id: str) -> list[Summary]:
        return await self._db.read(lambda conn: summaries.list_summaries(conn, session_id))

    async def add_constraints(
        self, session_id: str, constraints: Sequence[Constraint]
    ) -> list[Constraint]:
        items = list(constraints)
        self._contexts.forget(session_id)
        try:
            return await self._db.write(
                lambda conn: summaries.add_constraints(conn, session_id, items)
            )
        finally:
            self._contexts.forget(session_id)

    async def list_constraints(self, session_id: str) -> list[Constraint]:
        return await self._db.read(lambda conn: summaries.list_constraints(conn, session_id))

    async def summary_and_constraints(
        self, session_id: str
    ) -> tuple[Summary | None, list[Constraint]]:
        """:meth:`get_summary` and :meth:`list_constraints` from one snapshot: what every
        step's context reads. Answered without I/O while no other connection committed
        since this store last read them (see :mod:`.context`)."""
        known = self._contexts.get(session_id)
        if known is not None:
            return known

        def op(conn: sqlite3.Connection) -> tuple[Summary | None, list[Constraint], int]:
            found = read_context(conn, session_id)
            self._contexts.version = found[2]  # here: in the order of the I/O thread's calls
            return found

        summary, constraints, version = await self._db.read(op)
        self._contexts.put(session_id, summary, constraints, version)
        return summary, constraints

    async def search_history(
        self, session_id: str, query: str, *, through_seq: int | None = None, limit: int = 20
    ) -> list[StoredMessage]:
        recall.search_terms(query)  # a bad query fails before anything is written
        await self._db.write(summaries.catch_up_index)
        return await self._db.read(
            lambda conn: summaries.search(conn, session_id, query, through_seq, max(limit, 0))
        )

    async def check_writable(self) -> None:
        """Raise :class:`~plait.domain.errors.StoreUnavailableError` unless the store can
        commit now (``GET /v1/ready``)."""
        await self._db.check_writable()

    async def close(self) -> None:
        await self._db.close()
