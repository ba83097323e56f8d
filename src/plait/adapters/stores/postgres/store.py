"""The PostgreSQL store: all state in one database shared by any number of processes.

Native async I/O (psycopg 3 with a connection pool): no store call blocks the event loop.
Every port write is one transaction; reads run in autocommit. A commit locks its session
row (``SELECT … FOR UPDATE``) before checking the version, so two writers of one session
serialize and the loser gets :class:`~plait.domain.errors.ConflictError`, never an
interleaving; the ``(session_id, seq)`` key backs that up. Leases are fenced in the same
statements as the SQLite store's. Every psycopg exception is translated at this edge.

The pool opens lazily on first use (``open_store`` is synchronous) and applies missing
schema migrations then (see :mod:`.schema`; ``plait db upgrade`` does the same). The
pool belongs to the event loop that opened it; a later loop gets its own once that one
is closed (:mod:`.pool`).
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeVar

import psycopg
from psycopg_pool import AsyncConnectionPool

from plait.adapters.stores.postgres import (
    approvals,
    fork,
    retention,
    segments,
    service,
    summaries,
    tokens,
    webhooks,
)
from plait.adapters.stores.postgres import sql as q
from plait.adapters.stores.postgres.commit import apply, apply_with_events
from plait.adapters.stores.postgres.context_cache import ContextCache
from plait.adapters.stores.postgres.pool import LoopPool
from plait.adapters.stores.postgres.presence import Presence
from plait.adapters.stores.postgres.schema import redact, translate, upgrade
from plait.adapters.stores.postgres.warm import warm
from plait.adapters.stores.shared import codec
from plait.adapters.stores.shared.health import CommitHealth
from plait.adapters.stores.shared.inbox_pages import waiting_runs_sql
from plait.adapters.stores.shared.pipeline import PipelinedCommits
from plait.adapters.stores.shared.rows import (
    decode_messages,
    json_value,
    run_from_row,
    session_from_row,
    session_row,
)
from plait.adapters.stores.shared.state import (
    artifact_not_found,
    artifact_ref,
    artifact_ref_of_file,
    check_new_session,
    check_token,
    closed_error,
    duplicate_session,
    lease_lost,
    run_not_found,
    session_not_found,
    validate_commit,
)
from plait.adapters.stores.shared.unstorable import unstorable
from plait.application.claiming import ClaimedRun
from plait.application.ports import (
    CarriedEvents,
    Commit,
    CommitResult,
    EventCarrier,
    ForkCommit,
    StoreCapabilities,
)
from plait.domain.errors import PlaitError, StoreUnavailableError
from plait.domain.forks import ForkRecord
from plait.domain.governance import Approval, ApprovalUse
from plait.domain.messages import ArtifactRef, Message
from plait.domain.retention import Expiry, Tombstone
from plait.domain.runs import Run, RunStatus
from plait.domain.service import ApiKey, NewRunEvent, RunEventRecord
from plait.domain.session import ExecutionRecord, ExecutionState, Session, StoredMessage
from plait.domain.summary import Constraint, Summary
from plait.domain.webhooks import Delivery, DeliveryAttempt, DeliveryJob, DeliveryStatus, Endpoint

__all__ = ["PostgresStore"]

T = TypeVar("T")
log = logging.getLogger("plait.events")
PROBE_SECONDS = 2.0
"""How long the readiness probe may wait for a connection and its commit."""
OUTAGE_WAIT_SECONDS = 2.0
"""How long a call may wait for a connection while the server is known to be down."""
Conn = psycopg.AsyncConnection[Any]
_EXEC_STATE = {s.value: s for s in ExecutionState}


class PostgresStore(PipelinedCommits):
    """:class:`~plait.application.ports.SessionStore` and
    :class:`~plait.application.ports.ArtifactStore` on one PostgreSQL database; what else it
    keeps is in :attr:`capabilities`."""

    capabilities = StoreCapabilities.all_but("history_read")

    def __init__(
        self,
        url: str,
        *,
        min_size: int = 1,
        max_size: int = 8,
        migrate: bool = True,
        wait_seconds: float = 10.0,
        presence_settle_seconds: float = 2.0,
    ) -> None:
        """``wait_seconds``: how long a call may wait for a pooled connection (all busy,
        or the server unreachable) before it fails. ``presence_settle_seconds``: how long
        this store's presence must have been held before it takes the runs of owners
        whose presence ended (see :mod:`.presence`)."""
        self._url = url
        self._where = redact(url)
        self._pools = LoopPool(
            url,
            self._where,
            min_size=min_size,
            max_size=max_size,
            migrate=migrate,
            wait_seconds=wait_seconds,
        )
        self._contexts = ContextCache()
        self.health = CommitHealth()
        self._presence: Presence | None = None
        self._settle = presence_settle_seconds
        self._carriers: list[EventCarrier] = []
        self._notices: dict[str, int] = {}
        self._notifying: asyncio.Task[None] | None = None
        self.notify_linger_seconds = 0.05
        """How long a notification of written events waits for others to share its
        statement (see :meth:`_notify_soon`)."""

    def __repr__(self) -> str:
        return f"PostgresStore({self._where!r})"

    @property
    def url(self) -> str:
        return self._url

    # --- connections ----------------------------------------------------------------------

    async def _ready(self) -> AsyncConnectionPool[Conn]:
        return await self._pools.get()

    async def _pool(self) -> AsyncConnectionPool[Conn]:
        try:
            return await self._ready()
        except StoreUnavailableError as error:
            self.health.failed(error)
            raise

    async def _write(self, op: Callable[[Conn], Awaitable[T]]) -> T:
        pool = await self._pool()
        try:
            async with self._pools.connection(pool, self._wait()) as conn, conn.transaction():
                result = await op(conn)
        except psycopg.Error as error:
            raise self._failed(error) from error
        except UnicodeEncodeError as error:
            raise unstorable(error, self._where) from error
        self.health.succeeded()
        return result

    async def _read(self, op: Callable[[Conn], Awaitable[T]]) -> T:
        pool = await self._pool()
        try:
            async with self._pools.connection(pool, self._wait()) as conn:
                result = await op(conn)
        except psycopg.Error as error:
            raise self._failed(error) from error
        except UnicodeEncodeError as error:
            raise unstorable(error, self._where) from error
        self.health.succeeded()  # autocommit: a statement that wrote has committed
        return result

    async def _statement(self, op: Callable[[Conn], Awaitable[T]]) -> T:
        """A write of one statement (and, when it changed nothing, the reads that say
        why): in autocommit the statement is its own durable transaction, so ``BEGIN``
        and ``COMMIT`` around it would add two round trips and nothing else (a read after
        it sees a new snapshot either way, at read committed)."""
        return await self._read(op)

    def _wait(self) -> float | None:
        """How long a call may wait for a pooled connection: the pool's timeout (a busy
        pool), but only :data:`OUTAGE_WAIT_SECONDS` while the server is known to be down
        (a request answers ``store_unavailable`` soon rather than hang)."""
        return OUTAGE_WAIT_SECONDS if self.health.failing else None

    def _failed(self, cause: psycopg.Error) -> PlaitError:
        error = translate(cause, self._where)
        if isinstance(error, StoreUnavailableError):
            self.health.failed(error)
        return error

    async def check_writable(self) -> None:
        """Raise :class:`StoreUnavailableError` unless the store can commit now
        (``GET /v1/ready``): a probe that commits a transaction id (a WAL record, as any
        commit writes; nothing in any table) fails within :data:`PROBE_SECONDS`."""

        async def probe(conn: Conn) -> None:
            await conn.execute("SELECT txid_current()")

        try:
            async with asyncio.timeout(PROBE_SECONDS):
                await self._write(probe)
        except TimeoutError:
            raise StoreUnavailableError(
                f"{self._where}: no connection could commit within {PROBE_SECONDS:g} s",
                store=self._where,
            ) from None

    async def _one(self, sql: str, params: tuple[Any, ...]) -> tuple[Any, ...] | None:
        async def op(conn: Conn) -> tuple[Any, ...] | None:
            return await (await conn.execute(sql, params)).fetchone()

        return await self._read(op)

    async def _all(self, sql: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        async def op(conn: Conn) -> list[tuple[Any, ...]]:
            return await (await conn.execute(sql, params)).fetchall()

        return await self._read(op)

    async def upgrade(self) -> tuple[int, int]:
        """Apply missing migrations now; returns (version before, version after)."""
        if self._pools.closed:
            raise closed_error("postgresql")
        try:
            async with await psycopg.AsyncConnection.connect(
                self._url, autocommit=True, connect_timeout=10
            ) as conn:
                return await upgrade(conn, self._where)
        except psycopg.Error as error:
            raise self._failed(error) from error

    # --- sessions -------------------------------------------------------------------------

    async def create_session(self, session: Session) -> None:
        check_new_session(session)

        async def op(conn: Conn) -> None:
            cur = await conn.execute(q.INSERT_SESSION, session_row(session))
            if cur.rowcount != 1:
                raise duplicate_session(session.id)

        await self._statement(op)

    async def get_session(self, session_id: str) -> Session:
        row = await self._one(q.GET_SESSION, (session_id,))
        if row is None:
            raise session_not_found(session_id)
        return session_from_row(row)

    async def list_sessions(
        self, *, limit: int | None = None, owner: str | None = None, before: str | None = None
    ) -> list[Session]:
        lim = None if limit is None else max(limit, 0)
        sql, args = q.session_page(owner=owner, before=before, limit=lim)

        async def op(conn: Conn) -> list[tuple[Any, ...]]:
            found = (
                before is None or await (await conn.execute(q.SESSION_EXISTS, (before,))).fetchone()
            )
            if not found:
                raise session_not_found(str(before))
            return await (await conn.execute(sql, args)).fetchall()

        return [session_from_row(r) for r in await self._read(op)]

    async def read_messages(
        self, session_id: str, *, after: int = 0, limit: int | None = None
    ) -> list[StoredMessage]:
        lim = None if limit is None else max(limit, 0)

        async def op(conn: Conn) -> list[StoredMessage]:
            rows: list[Any] = []
            for owner, lo, hi in await segments.ranges(conn, session_id, after):
                want = None if lim is None else lim - len(rows)
                if want == 0:
                    break
                cur = await conn.execute(q.READ_MESSAGES, (owner, lo - 1, hi, want))
                rows += await cur.fetchall()
            if not rows:
                exists = await (await conn.execute(q.SESSION_EXISTS, (session_id,))).fetchone()
                if exists is None:
                    raise session_not_found(session_id)
            return decode_messages([(*r[:3], r[3].decode(), *r[4:]) for r in rows])

        return await self._read(op)

    # --- writes ---------------------------------------------------------------------------

    # One statement in autocommit: its own durable transaction, one round trip.

    async def start_run(self, commit: Commit) -> CommitResult:
        validate_commit(commit, start=True)
        return await self._apply(commit, start=True)

    async def commit(self, commit: Commit) -> CommitResult:
        validate_commit(commit, start=False)
        return await self._apply(commit, start=False)

    async def _apply(self, commit: Commit, *, start: bool) -> CommitResult:
        """One statement; when the commit is fenced by a lease token, with the pending
        run events an attached carrier gives for it (see :meth:`attach_carrier`)."""
        sid = commit.session_id
        carrier, carried = self._take_events(commit)
        written: dict[str, list[RunEventRecord]] = {}
        try:
            if carrier is None:
                result, stamp = await self._read(lambda conn: apply(conn, commit, start=start))
            else:
                result, stamp, written = await self._read(
                    lambda conn: apply_with_events(conn, commit, carried, start=start)
                )
        except BaseException:
            self._contexts.forget(sid)
            if carrier is not None:
                carrier.settle(carried, None)  # rolled back with the commit: written alone
            raise
        self._contexts.committed(sid, stamp)
        if carrier is not None:
            carrier.settle(carried, written)
            self._notify_written(written)
        return result

    def _take_events(self, commit: Commit) -> tuple[EventCarrier | None, CarriedEvents]:
        run_id = commit.run.id if commit.run is not None else commit.lease_run_id
        token = commit.lease_token
        if run_id is not None and token is not None:
            for carrier in self._carriers:
                carried = carrier.take(run_id, token)
                if carried:
                    return carrier, carried
        return None, CarriedEvents({}, {})

    async def reserve_connections(self, count: int) -> None:
        # Opened together now: the pool otherwise grows one at a time as calls wait; and
        # each made ready for the runs' statements (see .warm) before any run uses it.
        await self._pools.reserve(count, ready=warm)

    def attach_carrier(self, carrier: EventCarrier) -> None:
        """A commit fenced by a lease token takes the pending run events ``carrier`` gives
        for it (its run's, the carrier's other runs') and writes them in its own
        transaction (``plait_commit_events``): one durable flush for the step and the
        events, and no event write of their own."""
        if carrier not in self._carriers:
            self._carriers.append(carrier)

    def detach_carrier(self, carrier: EventCarrier) -> None:
        if carrier in self._carriers:
            self._carriers.remove(carrier)

    def _notify_soon(self, last: Mapping[str, int]) -> None:
        """Tell listeners (other processes' event feeds) that runs have events up to
        ``last``: once per :attr:`notify_linger_seconds` for everything written meanwhile,
        in a statement of its own, after the events are durable. Not in the events'
        transaction: ``NOTIFY`` holds a database-wide lock from the notifying commit until
        its WAL flush is done, so every notifying commit goes one at a time; a transaction
        that only notifies need not wait for a flush (it writes nothing durable), so the
        lock is held for microseconds. A notification lost (an outage) costs the streams
        a poll interval."""
        for run_id, seq in last.items():
            self._notices[run_id] = max(seq, self._notices.get(run_id, 0))
        task = self._notifying
        loop = asyncio.get_running_loop()
        if task is None or task.done() or task.get_loop() is not loop:
            self._notifying = loop.create_task(self._send_notices())

    async def _send_notices(self) -> None:
        while self._notices:
            await asyncio.sleep(self.notify_linger_seconds)
            notices, self._notices = self._notices, {}
            payloads = [f"{run_id} {seq}" for run_id, seq in notices.items()]
            try:
                await self._read(functools.partial(service.notify, payloads=payloads))
            except PlaitError as error:
                log.warning("run events written but not notified: %s", error.message)

    # --- runs -----------------------------------------------------------------------------

    async def get_run(self, run_id: str) -> Run:
        row = await self._one(q.GET_RUN, (run_id,))
        if row is None:
            raise run_not_found(run_id)
        return run_from_row(row)

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
        lim = None if limit is None else max(limit, 0)
        sql, args = waiting_runs_sql(
            q.RUN_COLS, "ord", "%s", status=status, owner=owner, before=before, limit=lim
        )

        async def op(conn: Conn) -> list[tuple[Any, ...]]:
            if (
                before is not None
                and await (await conn.execute(q.GET_RUN, (before,))).fetchone() is None
            ):
                raise run_not_found(before)
            return await (await conn.execute(sql, args)).fetchall()

        return [run_from_row(r) for r in await self._read(op)]

    async def list_runs(self, *, session_id: str | None = None) -> list[Run]:
        async def op(conn: Conn) -> list[tuple[Any, ...]]:
            if session_id is None:
                return await (await conn.execute(q.LIST_RUNS)).fetchall()
            rows = await (await conn.execute(q.LIST_SESSION_RUNS, (session_id,))).fetchall()
            if not rows:
                exists = await (await conn.execute(q.SESSION_EXISTS, (session_id,))).fetchone()
                if exists is None:
                    raise session_not_found(session_id)
            return rows

        return [run_from_row(r) for r in await self._read(op)]

    async def request_cancel(self, run_id: str) -> Run:
        async def op(conn: Conn) -> tuple[Any, ...] | None:
            return await (await conn.execute(q.CANCEL, (run_id,))).fetchone()

        row = await self._statement(op)
        if row is None:
            raise run_not_found(run_id)
        return run_from_row(row)

    async def get_executions(self, run_id: str) -> list[ExecutionRecord]:
        async def op(conn: Conn) -> list[tuple[Any, ...]]:
            rows = await (await conn.execute(q.LIST_EXECUTIONS, (run_id, run_id))).fetchall()
            if not rows and await (await conn.execute(q.LEASE, (run_id,))).fetchone() is None:
                raise run_not_found(run_id)
            return rows

        return [
            codec.execution_from_dict(json_value(r[0], "execution record"))
            for r in await self._read(op)
        ]

    async def claim_run(self, run_id: str, *, owner: str, now: float, expires_at: float) -> Run:
        async def op(conn: Conn) -> tuple[Any, ...]:
            sql = q.CLAIM_OR_ORPHANED if self._orphans_visible() else q.CLAIM
            cur = await conn.execute(sql, (owner, expires_at, run_id, now, owner))
            row = await cur.fetchone()
            if row is None:
                await self._lease_failure(conn, run_id, owner)
            assert row is not None
            return tuple(row)

        return run_from_row(await self._statement(op))

    async def renew_lease(
        self, run_id: str, *, owner: str, expires_at: float, lease_token: int | None = None
    ) -> None:
        async def op(conn: Conn) -> None:
            params = (expires_at, run_id, owner, lease_token, lease_token)
            cur = await conn.execute(q.RENEW, params)
            if cur.rowcount != 1:
                await self._lease_failure(conn, run_id, owner, lease_token)

        await self._statement(op)

    async def _lease_failure(
        self, conn: Conn, run_id: str, owner: str, lease_token: int | None = None
    ) -> None:
        row = await (await conn.execute(q.LEASE, (run_id,))).fetchone()
        if row is None:
            raise run_not_found(run_id)
        ended = RunStatus(row[3]).terminal
        check_token(run_id, row[2], lease_token, ended=ended, wanted=owner)
        raise lease_lost(run_id, row[0], row[1], wanted=owner)

    async def list_stale_runs(self, *, now: float, status: RunStatus | None = None) -> list[Run]:
        sql = q.STALE_OR_ORPHANED if self._orphans_visible() else q.STALE
        wanted = None if status is None else status.value
        return [run_from_row(r) for r in await self._all(sql, (wanted, wanted, now))]

    async def list_leased_runs(self, *, now: float, status: RunStatus | None = None) -> list[Run]:
        wanted = None if status is None else status.value
        return [run_from_row(r) for r in await self._all(q.LEASED, (wanted, wanted, now))]

    def _orphans_visible(self) -> bool:
        """Whether runs of owners whose presence ended count as stale here: only where
        this store's own presence is settled (see :mod:`.presence`)."""
        return self._presence is not None and self._presence.settled()

    # --- artifacts ------------------------------------------------------------------------

    async def put_artifact(self, data: bytes, *, media_type: str) -> ArtifactRef:
        ref = artifact_ref(data, media_type)
        row = (ref.id, ref.sha256, ref.size, ref.media_type, bytes(data))

        async def op(conn: Conn) -> None:
            await conn.execute(q.PUT_ARTIFACT, row)

        await self._statement(op)
        return ref

    async def put_artifact_file(self, path: str, *, media_type: str) -> ArtifactRef:
        """A ``bytea`` value is sent whole: the file is read (in a worker thread) only
        when no artifact with its content exists yet."""
        ref = await asyncio.to_thread(artifact_ref_of_file, path, media_type)
        if await self._one(q.GET_ARTIFACT, (ref.id,)) is not None:
            return ref
        data = await asyncio.to_thread(_read_file, path)
        return await self.put_artifact(data, media_type=media_type)

    async def get_artifact(self, artifact_id: str) -> tuple[ArtifactRef, bytes]:
        row = await self._one(q.GET_ARTIFACT, (artifact_id,))
        if row is None:
            raise artifact_not_found(artifact_id)
        aid, sha, size, media_type, data = row
        return ArtifactRef(id=aid, sha256=sha, size=size, media_type=media_type), bytes(data)

    async def close(self) -> None:
        task, self._notifying = self._notifying, None
        if task is not None and not task.done():
            try:
                running = asyncio.get_running_loop()
            except RuntimeError:
                running = None
            if task.get_loop() is running:
                await task  # the last notifications go out before the pool closes
        presence, self._presence = self._presence, None
        if presence is not None:
            await presence.close()
        await self._pools.close()

    async def hold_presence(self, owner: str) -> None:
        """See :mod:`.presence`: one connection of this store holds ``owner``'s lock."""
        present = self._presence
        if present is not None and (present.owner, present.loop) == (
            owner,
            asyncio.get_running_loop(),
        ):
            return
        await self._ready()  # the schema is migrated first; refused in a second live loop
        if present is not None and present.loop is not asyncio.get_running_loop():
            self._presence = None  # held in a loop that is gone (one store, several loops)
            present.abandon()
        presence = Presence(self._url, self._where, owner)
        presence.settle_seconds = self._settle
        try:
            await presence.hold()
        except psycopg.Error as error:
            raise self._failed(error) from error
        old, self._presence = self._presence, presence
        if old is not None:
            await old.close()

    # --- service mode: queue, events, keys (see service.py) -------------------------------

    async def claim_queued_run(self, *, owner: str, now: float, expires_at: float) -> Run | None:
        # One statement in autocommit is its own (durable) transaction: no BEGIN/COMMIT
        # round trips for the claim the workers make most often.
        row = await self._read(lambda conn: service.claim_queued(conn, owner, now, expires_at))
        return None if row is None else run_from_row(row)

    async def count_queued_runs(self, *, now: float) -> int:
        return await self._read(lambda conn: service.count_queued(conn, now))

    async def claim_and_start_run(
        self, *, owner: str, now: float, expires_at: float, model: str, model_spec: str | None
    ) -> ClaimedRun | None:
        # The claim, the run's "running" write and the history read in one statement (its
        # own durable transaction in autocommit): see plait.application.claiming.
        found = await self._read(
            lambda conn: service.claim_started(conn, owner, now, expires_at, model, model_spec)
        )
        if found is None:
            return None
        claimed, stamp = found
        self._contexts.claimed(claimed.session.id, stamp)
        return claimed

    async def append_run_events(
        self, run_id: str, events: Sequence[NewRunEvent], *, lease_token: int | None = None
    ) -> list[RunEventRecord]:
        if lease_token is None or not events:
            return (await self.append_run_events_batch({run_id: events}))[run_id]

        async def op(conn: Conn) -> list[RunEventRecord]:
            row = await (await conn.execute(q.FENCE, (run_id,))).fetchone()
            check_token(
                run_id,
                None if row is None else int(row[0]),
                lease_token,
                ended=False,  # a run's last events come after its end: the token counts
                wanted=None,
            )
            return (await service.append_batch(conn, {run_id: events}))[run_id]

        written = await self._write(op)
        self._notify_written({run_id: written})
        return written

    async def append_run_events_batch(
        self,
        batch: Mapping[str, Sequence[NewRunEvent]],
        *,
        lease_tokens: Mapping[str, int] | None = None,
    ) -> dict[str, list[RunEventRecord]]:
        # One statement in autocommit (see service.append_batch); listeners are told after.
        written = await self._read(lambda conn: service.append_batch(conn, batch, lease_tokens))
        self._notify_written(written)
        return written

    def _notify_written(self, written: Mapping[str, Sequence[RunEventRecord]]) -> None:
        last = {run_id: records[-1].seq for run_id, records in written.items() if records}
        if last:
            self._notify_soon(last)

    async def read_run_events(
        self, run_id: str, *, after: int = 0, limit: int | None = None
    ) -> list[RunEventRecord]:
        return await self._read(lambda conn: service.read_events(conn, run_id, after, limit))

    async def add_api_key(self, key: ApiKey) -> None:
        await self._statement(lambda conn: service.add_key(conn, key))

    async def find_api_key(self, key_hash: str) -> ApiKey | None:
        return await self._read(lambda conn: service.find_key(conn, key_hash))

    # --- webhooks: endpoints and the outbox (see webhooks.py) -----------------------------

    async def add_webhook(self, endpoint: Endpoint) -> None:
        await self._statement(lambda conn: webhooks.add(conn, endpoint))

    async def put_webhook(self, endpoint: Endpoint) -> None:
        await self._statement(lambda conn: webhooks.put(conn, endpoint))

    async def list_webhooks(self, *, principal: str | None = None) -> list[Endpoint]:
        return await self._read(lambda conn: webhooks.listing(conn, principal))

    async def get_webhook(self, endpoint_id: str) -> Endpoint:
        return await self._read(lambda conn: webhooks.get(conn, endpoint_id))

    async def remove_webhook(self, endpoint_id: str) -> None:
        await self._write(lambda conn: webhooks.remove(conn, endpoint_id))

    async def resume_webhook(self, endpoint_id: str, *, now: float) -> Endpoint:
        return await self._write(lambda conn: webhooks.resume(conn, endpoint_id, now))

    async def list_deliveries(
        self,
        *,
        endpoint_id: str | None = None,
        status: DeliveryStatus | None = None,
        principal: str | None = None,
        limit: int = 100,
    ) -> list[Delivery]:
        return await self._read(
            lambda conn: webhooks.deliveries(conn, endpoint_id, status, principal, limit)
        )

    async def claim_deliveries(
        self, *, owner: str, now: float, expires_at: float, limit: int
    ) -> list[DeliveryJob]:
        return await self._write(lambda conn: webhooks.claim(conn, owner, now, expires_at, limit))

    async def finish_delivery(self, attempt: DeliveryAttempt) -> None:
        await self._write(lambda conn: webhooks.finish(conn, attempt))

    # --- approvals (see approvals.py) -----------------------------------------------------

    async def request_approval(
        self, approval: Approval, *, lease_token: int | None = None
    ) -> Approval:
        return await self._write(lambda conn: approvals.request(conn, approval, lease_token))

    async def get_approval(self, approval_id: str) -> Approval:
        return await self._read(lambda conn: approvals.get(conn, approval_id))

    async def list_pending_approvals(
        self, *, owner: str | None = None, before: str | None = None, limit: int | None = None
    ) -> list[Approval]:
        """Pending approval requests, newest first, of sessions owned by ``owner``
        (``None``: everyone's); ``before``: the previous page's last approval id."""
        lim = None if limit is None else max(limit, 0)
        return await self._read(
            lambda conn: approvals.pending(conn, owner=owner, before=before, limit=lim)
        )

    async def list_approvals(
        self, *, session_id: str | None = None, run_id: str | None = None
    ) -> list[Approval]:
        return await self._read(lambda conn: approvals.listing(conn, session_id, run_id))

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
        return await self._write(
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
        return await self._write(lambda conn: approvals.consume(conn, approval_id, use))

    # --- retention (see retention.py) -----------------------------------------------------

    async def expire_messages(self, session_id: str, tombstones: Sequence[Tombstone]) -> list[str]:
        return await self._write(lambda conn: retention.expire(conn, session_id, tombstones))

    async def restore_messages(self, session_id: str, messages: Sequence[Message]) -> list[str]:
        return await self._write(lambda conn: retention.restore(conn, session_id, messages))

    async def expiries(self, session_id: str) -> dict[str, Expiry]:
        return await self._read(lambda conn: retention.expiries(conn, session_id))

    # --- token counts (see tokens.py) -----------------------------------------------------

    async def read_token_counts(self, session_id: str, meter: str) -> dict[str, int]:
        return await self._read(lambda conn: tokens.read(conn, session_id, meter))

    async def save_token_counts(
        self, session_id: str, meter: str, counts: Mapping[str, int]
    ) -> None:
        if counts:
            await self._statement(lambda conn: tokens.save(conn, session_id, meter, counts))

    # --- forks (see fork.py) --------------------------------------------------------------

    async def message_seq(self, session_id: str, message_id: str) -> int | None:
        return await self._read(lambda conn: fork.message_seq(conn, session_id, message_id))

    async def fork_session(self, commit: ForkCommit) -> ForkRecord:
        return await self._write(lambda conn: fork.fork(conn, commit))

    async def get_fork_record(self, session_id: str) -> ForkRecord | None:
        return await self._read(lambda conn: fork.get_record(conn, session_id))

    # --- summaries, constraints, search (see summaries.py) --------------------------------

    async def activate_summary(self, summary: Summary, *, expected_generation: int) -> None:
        self._contexts.forget(summary.session_id)
        try:
            await self._write(lambda conn: summaries.activate(conn, summary, expected_generation))
        finally:
            self._contexts.forget(summary.session_id)

    async def get_summary(self, session_id: str) -> Summary | None:
        return await self._read(lambda conn: summaries.get_active(conn, session_id))

    async def list_summaries(self, session_id: str) -> list[Summary]:
        return await self._read(lambda conn: summaries.list_summaries(conn, session_id))

    async def add_constraints(
        self, session_id: str, constraints: Sequence[Constraint]
    ) -> list[Constraint]:
        items = list(constraints)
        self._contexts.forget(session_id)
        try:
            return await self._write(
                lambda conn: summaries.add_constraints(conn, session_id, items)
            )
        finally:
            self._contexts.forget(session_id)

    async def list_constraints(self, session_id: str) -> list[Constraint]:
        return await self._read(lambda conn: summaries.list_constraints(conn, session_id))

    async def summary_and_constraints(
        self, session_id: str
    ) -> tuple[Summary | None, list[Constraint]]:
        """:meth:`get_summary` and :meth:`list_constraints` in one statement (one
        snapshot, one round trip): what every step's context reads. Answered without
        I/O when this store's last commit of the session found them unchanged since
        its last read (see :mod:`.context_cache`)."""
        known = self._contexts.take(session_id)
        if known is not None:
            return known
        found = await self._read(lambda conn: summaries.active_and_constraints(conn, session_id))
        self._contexts.read(session_id, *found)
        return found

    async def search_history(
        self, session_id: str, query: str, *, through_seq: int | None = None, limit: int = 20
    ) -> list[StoredMessage]:
        return await self._read(
            lambda conn: summaries.search(conn, session_id, query, through_seq, max(limit, 0))
        )


def _read_file(path: str) -> bytes:
    with open(path, "rb") as file:
        return file.read()
