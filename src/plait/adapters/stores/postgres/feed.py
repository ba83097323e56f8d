"""Live run events across processes on PostgreSQL: one ``LISTEN`` connection per process.

The store notifies channel :data:`._pg_service.CHANNEL` once events are durable
(``"<run_id> <last seq>"``, in a statement of its own a few milliseconds after the
write, shared by the events written meanwhile). :class:`PgEventFeed` holds one listener
connection and fans notifications out to the streams of this process through a
:class:`~plait.application.event_feed.LocalEventFeed`. While the listener is down (not
yet connected, or the connection dropped) the feed is not ``live``: waits end after the
poll interval, so streams fall back to polling by sequence, and the listener reconnects
in the background; when it is back every stream re-reads once to catch up.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

import psycopg

from plait.adapters.stores.postgres.schema import redact
from plait.adapters.stores.postgres.service import CHANNEL
from plait.application.event_feed import LocalEventFeed

__all__ = ["PgEventFeed"]

log = logging.getLogger("plait.events")


class PgEventFeed:
    """:class:`~plait.application.event_feed.RunEventFeed` over PostgreSQL ``LISTEN``."""

    def __init__(self, url: str, *, poll_seconds: float = 0.5, retry_seconds: float = 1.0) -> None:
        self._url = url
        self._where = redact(url)
        self._local = LocalEventFeed(poll_seconds=poll_seconds)
        self._local.live = False
        self._retry = retry_seconds
        self._task: asyncio.Task[None] | None = None
        self._closed = False
        self.connected = asyncio.Event()
        """Set while the listener is listening (tests wait for it)."""

    @property
    def live(self) -> bool:
        return self._local.live

    def notify(self, run_id: str, seq: int) -> None:
        self._local.notify(run_id, seq)

    async def wait(self, run_id: str, *, after: int, at_most: float) -> bool:
        self.start()
        return await self._local.wait(run_id, after=after, at_most=at_most)

    def start(self) -> None:
        """Start listening (the first wait does it too)."""
        if self._task is None and not self._closed:
            self._task = asyncio.create_task(self._listen_forever())

    async def close(self) -> None:
        self._closed = True
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self._local.close()

    async def _listen_forever(self) -> None:
        delay = self._retry
        while not self._closed:
            try:
                await self._listen()
            except (psycopg.Error, OSError) as error:
                log.warning("event listener on %s lost: %s; polling meanwhile", self._where, error)
            # It was up: try again soon; the server is unreachable: back off.
            delay = self._retry if self.connected.is_set() else min(delay * 2, 30.0)
            self._local.live = False
            self.connected.clear()
            self._local.wake_all()
            await asyncio.sleep(delay)

    async def _listen(self) -> None:
        async with await psycopg.AsyncConnection.connect(
            self._url, autocommit=True, connect_timeout=10
        ) as conn:
            await conn.execute(f"LISTEN {CHANNEL}")
            self._local.live = True
            self.connected.set()
            self._local.wake_all()  # whatever was written while nobody listened
            async for notice in conn.notifies():
                run_id, _, seq = notice.payload.rpartition(" ")
                with contextlib.suppress(ValueError):
                    self._local.notify(run_id, int(seq))
