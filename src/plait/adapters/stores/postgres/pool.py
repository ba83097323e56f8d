"""The PostgreSQL store's connection pool, bound to the event loop that uses it.

psycopg's async pool (its connections, workers and conditions) belongs to the loop it
was opened in. A store handle outlives loops, though: each ``asyncio.run`` of a CLI
command or a test is a new loop. So the pool is opened lazily in the loop that first
needs it; once that loop is closed the next loop gets a fresh pool (the old one's
connections are dropped without awaiting anything of the dead loop). A loop that is
still open elsewhere keeps its pool, and any other loop is refused with a clear error
rather than left to hang on a pool it cannot drive.

Connections outlive server restarts in the pool only as dead sockets, so each is checked
when it is handed out (:func:`check_idle`: free unless the socket has something to say,
which an idle connection's only has when the server closed it) and replaced if dead. A
failed open is retried by the next call: a server that does not answer is a
:class:`~plait.domain.errors.StoreUnavailableError` (the callers back off and retry),
one that refuses the user or database a plain store error.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import select
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import psycopg
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from plait.adapters.stores.postgres.schema import is_unavailable, prepare, unavailable
from plait.adapters.stores.shared.closed import closed_error
from plait.domain.errors import ConfigError

__all__ = ["LoopPool"]

log = logging.getLogger("plait.store")

Conn = psycopg.AsyncConnection[Any]
Pool = AsyncConnectionPool[Conn]

Ready = Callable[[Conn], Awaitable[None]]
"""What :meth:`LoopPool.reserve` does with each connection it opened, before any use."""

_RESERVE_SECONDS = 5.0
"""How long :meth:`LoopPool.reserve` waits for the reserved connections to open."""
_READY_WAIT_SECONDS = 0.1
"""How long :meth:`LoopPool.reserve` waits for each idle connection it makes ready."""


async def check_idle(conn: Conn) -> None:
    """Raise if a pooled connection is dead (the pool then discards it and hands out
    another, or opens a new one). An idle connection's socket is readable only if the
    server spoke first: it closed the connection (a restart, an administrator), or
    sent a notice; only then is the connection checked with a round trip."""
    if conn.closed or conn.broken:
        raise psycopg.OperationalError("the connection is closed")
    try:
        readable = _readable(conn.pgconn.socket)
    except (OSError, psycopg.OperationalError) as error:
        raise psycopg.OperationalError(f"the connection is gone: {error}") from error
    if readable:
        await AsyncConnectionPool.check_connection(conn)


def _readable(fd: int) -> bool:
    """Whether ``fd`` has data (or an end of file) to read now. ``poll``, not
    ``select``: a busy process may hold descriptors past ``select``'s limit."""
    if not hasattr(select, "poll"):  # pragma: no cover - Windows
        return bool(select.select([fd], [], [], 0)[0])
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(0))


class LoopPool:
    """One pool at a time, for the event loop that opened it."""

    def __init__(
        self,
        url: str,
        where: str,
        *,
        min_size: int,
        max_size: int,
        migrate: bool,
        wait_seconds: float = 10.0,
    ) -> None:
        self._wait_seconds = wait_seconds
        self._url = url
        self._where = where
        self._min_size = min_size
        self._max_size = max_size
        self._migrate = migrate
        self._pool: Pool | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._opening: tuple[asyncio.AbstractEventLoop, asyncio.Lock] | None = None
        self.closed = False

    async def get(self) -> Pool:
        if self.closed:
            raise closed_error("postgresql")
        loop = asyncio.get_running_loop()
        if self._pool is not None and self._loop is loop:
            return self._pool
        self._check_loop(loop)
        if self._opening is None or self._opening[0] is not loop:
            self._opening = (loop, asyncio.Lock())
        async with self._opening[1]:
            if self._pool is None or self._loop is not loop:
                self._check_loop(loop)
                self._pool, self._loop = await self._open(), loop
        return self._pool

    @contextlib.asynccontextmanager
    async def connection(self, pool: Pool, wait: float | None) -> AsyncIterator[Conn]:
        """A connection of ``pool``, waiting ``wait`` seconds at most (default: the
        pool's timeout). Asked for again every second: each request lets the pool open a
        new connection at once, where a single long wait would sit out the backoff of
        the pool's reconnection attempts after a server restart."""
        deadline = time.monotonic() + (self._wait_seconds if wait is None else wait)
        while True:
            left = deadline - time.monotonic()
            try:
                conn = await pool.getconn(timeout=max(min(left, 1.0), 0.01))
                break
            except PoolTimeout:
                if left <= 1.0:
                    raise
        try:
            yield conn
        finally:
            await pool.putconn(conn)

    async def reserve(self, count: int, ready: Ready | None = None) -> None:
        """At least ``count`` connections open from now on (at most the maximum): the
        pool's minimum raised, the missing ones opened together (the pool grows one at a
        time otherwise, each request waiting), and this returns once they are idle in the
        pool beside those in use now, each passed to ``ready`` first (all at once; one
        that fails is logged and left as it is). Best effort: one that cannot open within
        a few seconds opens at its first use."""
        pool = await self.get()
        wanted = min(count, self._max_size)
        if wanted <= pool.min_size:
            return
        before = pool.get_stats()
        in_use = before["pool_size"] - before["pool_available"]
        await pool.resize(wanted, pool.max_size)
        deadline = time.monotonic() + _RESERVE_SECONDS
        while pool.get_stats()["pool_available"] < wanted - in_use:
            if time.monotonic() > deadline:
                log.debug("reserved connections not all open yet (%s)", self._where)
                return
            await asyncio.sleep(0.01)
        if ready is not None:
            await self._make_ready(pool, wanted - in_use, ready)

    async def _make_ready(self, pool: Pool, count: int, ready: Ready) -> None:
        """``ready`` on up to ``count`` idle connections, each a different one (all are
        held until every one is done). One that is not idle at once (another caller of the
        pool took it meanwhile) is left: the others are not held waiting for it."""
        held: list[Conn] = []
        try:
            for _ in range(count):
                try:
                    held.append(await pool.getconn(timeout=_READY_WAIT_SECONDS))
                except PoolTimeout:
                    break
            outcomes = await asyncio.gather(*(ready(conn) for conn in held), return_exceptions=True)
        finally:
            for conn in held:
                await pool.putconn(conn)
        failed = [o for o in outcomes if isinstance(o, BaseException)]
        for outcome in failed:
            if not isinstance(outcome, Exception):
                raise outcome  # a cancellation, an interrupt
        if failed:  # once, not once per connection (an outage fails them all)
            log.warning(
                "%d of %d reserved connections were not made ready (%s): %s",
                len(failed),
                len(held),
                self._where,
                failed[0],
            )

    def _check_loop(self, loop: asyncio.AbstractEventLoop) -> None:
        """Drop a pool whose loop is gone; refuse to share one whose loop lives on."""
        old = self._loop
        if self._pool is None or old is None or old is loop:
            return
        if not old.is_closed():
            raise ConfigError(
                f"this PostgreSQL store ({self._where}) is in use by another event loop "
                "that is still open; use one store per event loop (or thread), or close "
                "the store in its loop first",
                store="postgresql",
            )
        self._abandon()

    async def _open(self) -> Pool:
        await prepare(self._url, self._where, migrate=self._migrate)
        pool: Pool = AsyncConnectionPool(
            self._url,
            min_size=self._min_size,
            max_size=self._max_size,
            kwargs={"autocommit": True},
            open=False,
            timeout=self._wait_seconds,
            check=check_idle,
            # A slot that cannot reconnect is given up after two tries (1 s apart), and
            # the next caller that waits opens a new one (see connection()): the delay
            # between attempts stays short however long the outage lasts.
            reconnect_timeout=2.0,
        )
        try:
            await pool.open(wait=True, timeout=30)
        except psycopg.Error as error:
            await pool.close()
            if is_unavailable(error):
                raise unavailable(error, self._where) from error
            raise
        return pool

    def _abandon(self) -> None:
        """Forget the pool of a loop that can no longer run it, closing its idle
        connections' sockets directly (nothing of that loop can be awaited now)."""
        pool, self._pool, self._loop = self._pool, None, None
        if pool is None:
            return
        idle: Any = getattr(pool, "_pool", ())  # psycopg_pool's idle connections
        for conn in list(idle):
            with contextlib.suppress(Exception):
                conn.pgconn.finish()
        pool._closed = True  # its workers died with their loop
        log.debug("dropped the pool of a closed event loop (%s)", self._where)

    async def close(self) -> None:
        self.closed = True
        pool, loop = self._pool, self._loop
        if pool is None:
            return
        current = asyncio.get_running_loop()
        if loop is current:
            self._pool = self._loop = None
            await pool.close()
        else:
            self._abandon()
