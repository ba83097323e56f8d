"""A worker's presence on PostgreSQL: its runs are free the moment its process dies.

A lease expires ``lease_seconds`` after its last renewal; until then nobody recovers the
run of a worker that died, however fast its death is known. PostgreSQL knows it at once:
a killed process's connections close, and the server drops the session-level locks they
held. So a worker that holds its presence (:meth:`Presence.hold`) keeps one connection
open holding a shared advisory lock keyed by its owner name, and records the name in
``worker_presence`` (each new holder deletes the rows of owners that neither hold their
lock nor lease a live run any more: the dead, once their runs were taken over). A run
whose lease owner is recorded there and holds no such lock is *orphaned*:
:data:`ORPHANED` is true of it, and the store treats it as a run whose lease expired
(``list_stale_runs`` lists it, ``claim_run`` takes it over). Owners never recorded (a
CLI process driving a run, a worker of an older version) keep the lease rule alone.

Safety does not rest on this: taking a run over bumps its lease token, so a process
that was only cut off from the server (its presence connection dropped, it lives on)
has its next write refused (``LeaseLostError``) and stops the run, as after an expired
lease. The lock key is a 32-bit hash of the owner: two owners sharing one make a dead
one look alive, and its runs wait for their leases to expire, as without presence.
While the connection is down the holder reconnects in the background.

A server restart (or a failover) cuts every presence at once, and each holder takes its
lock again a moment later, not all in the same instant: for that moment the live
workers look dead to one another. So a store applies the orphan rule only once its own
presence has been held without a break for :attr:`Presence.settle_seconds`
(:meth:`Presence.settled`): after a restart nobody takes over anybody's runs until
every holder had time to come back, and a store without a presence (the API process, a
CLI) never applies it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

import psycopg

from plait.domain.runs import RunStatus

__all__ = ["HELD", "ORPHANED", "PRESENCE_DDL", "Presence"]

log = logging.getLogger("plait.store")

Conn = psycopg.AsyncConnection[tuple[object, ...]]

LOCK_CLASS = 1886151017
"""The first key of the presence locks (``"plai"``), apart from any other advisory lock."""

PRESENCE_DDL = "CREATE TABLE worker_presence (owner TEXT PRIMARY KEY)"

HELD = (
    "SELECT objid FROM pg_locks WHERE locktype = 'advisory' AND granted "
    f"AND classid = {LOCK_CLASS} AND objsubid = 2"
)
"""The lock keys of the owners present now."""

ORPHANED = (
    "(lease_owner IN (SELECT owner FROM worker_presence) "
    f"AND hashtext(lease_owner)::oid NOT IN ({HELD}))"
)
"""True of a run row whose lease owner announced its presence and holds it no more (a
hashed subplan: ``pg_locks`` is read once per statement, not once per row)."""

_LOCK = f"SELECT pg_advisory_lock_shared({LOCK_CLASS}, hashtext(%s))"
_RECORD = "INSERT INTO worker_presence (owner) VALUES (%s) ON CONFLICT DO NOTHING"
_LIVE = ", ".join(f"'{s.value}'" for s in RunStatus if not s.terminal)
_PRUNE = (
    f"DELETE FROM worker_presence p WHERE hashtext(owner)::oid NOT IN ({HELD}) "
    f"AND NOT EXISTS (SELECT 1 FROM runs WHERE status IN ({_LIVE}) AND lease_owner = p.owner)"
)


class Presence:
    """One owner's presence, held on a connection of its own while the store is open."""

    def __init__(self, url: str, where: str, owner: str, *, retry_seconds: float = 1.0) -> None:
        self._url = url
        self._where = where
        self.owner = owner
        self._retry = retry_seconds
        self._task: asyncio.Task[None] | None = None
        self._conn: Conn | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        """The event loop the presence lives in (its connection and task belong to it)."""
        self.held = asyncio.Event()
        """Set while the lock is held."""
        self.settle_seconds = 2.0 * retry_seconds
        """How long the lock must have been held for the orphan rule to apply (at least
        ``retry_seconds``: every holder a restart cut tries again within it)."""
        self._since = 0.0

    async def hold(self) -> None:
        """Take the lock and record the owner (raises ``psycopg.Error`` if the server
        cannot be reached), then keep it held in the background."""
        self.loop = asyncio.get_running_loop()
        self._conn = await self._take()
        self._task = asyncio.create_task(self._keep())

    async def _take(self) -> Conn:
        conn = await psycopg.AsyncConnection.connect(self._url, autocommit=True, connect_timeout=10)
        try:  # the lock first: the owner is never recorded without it
            await conn.execute(_LOCK, (self.owner,))
            await conn.execute(_RECORD, (self.owner,))
            await conn.execute(_PRUNE)
        except BaseException:
            await conn.close()
            raise
        self._since = time.monotonic()
        self.held.set()
        return conn

    def settled(self) -> bool:
        """Whether the lock has been held without a break for :attr:`settle_seconds`."""
        return self.held.is_set() and time.monotonic() - self._since >= self.settle_seconds

    async def _keep(self) -> None:
        while True:
            if self._conn is not None:
                try:
                    async for _ in self._conn.notifies():  # ends once the connection is lost
                        pass
                except (psycopg.Error, OSError) as error:
                    log.warning("worker presence on %s lost: %s", self._where, error)
                self.held.clear()
                conn, self._conn = self._conn, None
                await conn.close()
            else:  # the first try right after the loss failed
                await asyncio.sleep(self._retry)
            with contextlib.suppress(psycopg.Error, OSError):
                self._conn = await self._take()

    def abandon(self) -> None:
        """Let go of the lock of a presence whose event loop is gone: its connection's
        socket is closed directly (nothing of that loop can be awaited now)."""
        conn, self._conn, self._task = self._conn, None, None
        if conn is not None:
            with contextlib.suppress(Exception):
                conn.pgconn.finish()

    async def close(self) -> None:
        """Let go of the lock (closing its connection)."""
        if self.loop is not asyncio.get_running_loop():
            self.abandon()
            return
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        conn, self._conn = self._conn, None
        if conn is not None:
            await conn.close()
        self.held.clear()
