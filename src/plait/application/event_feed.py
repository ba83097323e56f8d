"""Live run events in one process: who writes events says so, who streams them waits.

A :class:`LocalEventFeed` wakes the streams of a run as soon as a writer in this process
(the worker's event sink) persisted new events; the PostgreSQL adapter feeds the same
object from ``LISTEN`` so events written by workers in other processes wake them too. A
wake-up is a hint to read the store by sequence, never the data itself: a missed one
costs a poll interval, not an event.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from typing import Protocol

__all__ = ["LocalEventFeed", "RunEventFeed"]


class RunEventFeed(Protocol):
    """Wakes a run's event streams when its events are committed (here, or anywhere the
    store can tell): a hint to read by sequence; a missed one costs a poll interval.
    ``notify``: this process committed events up to ``seq``; ``wait``: until the run may
    have events after ``after`` (True) or ``at_most`` seconds passed (False); ``start``
    listening on the running loop (if the feed listens to anything)."""

    def notify(self, run_id: str, seq: int) -> None: ...

    async def wait(self, run_id: str, *, after: int, at_most: float) -> bool: ...

    def start(self) -> None: ...

    async def close(self) -> None: ...


class LocalEventFeed:
    """:class:`RunEventFeed` within one process (and the fan-out
    that cross-process feeds build on)."""

    def __init__(self, *, poll_seconds: float = 0.5, remember: int = 50_000) -> None:
        self.poll_seconds = poll_seconds
        """How long a wait lasts at most while notifications are not to be trusted."""
        self.live = True
        """False while notifications may be missed (a listener is down): waits then end
        after :attr:`poll_seconds` at most, so streams fall back to polling."""
        self._latest: OrderedDict[str, int] = OrderedDict()
        self._remember = remember
        self._waiters: dict[str, set[asyncio.Future[None]]] = {}

    def notify(self, run_id: str, seq: int) -> None:
        """Events up to ``seq`` of ``run_id`` are persisted (committed)."""
        if seq <= self._latest.get(run_id, 0):
            return
        self._latest[run_id] = seq
        self._latest.move_to_end(run_id)
        while len(self._latest) > self._remember:
            self._latest.popitem(last=False)
        for waiter in self._waiters.pop(run_id, ()):
            if not waiter.done():
                waiter.set_result(None)

    def wake_all(self) -> None:
        """Every stream re-reads the store (after notifications may have been missed)."""
        waiters, self._waiters = self._waiters, {}
        for group in waiters.values():
            for waiter in group:
                if not waiter.done():
                    waiter.set_result(None)

    async def wait(self, run_id: str, *, after: int, at_most: float) -> bool:
        """Until ``run_id`` has events after ``after`` (True) or ``at_most`` seconds
        passed (False; at most :attr:`poll_seconds` while the feed is not :attr:`live`)."""
        if self._latest.get(run_id, 0) > after:
            return True
        if not self.live:
            at_most = min(at_most, self.poll_seconds)
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.setdefault(run_id, set()).add(waiter)
        try:
            await asyncio.wait_for(waiter, at_most)
        except TimeoutError:
            return False
        finally:
            group = self._waiters.get(run_id)
            if group is not None:
                group.discard(waiter)
                if not group:
                    del self._waiters[run_id]
        return self._latest.get(run_id, 0) > after

    def start(self) -> None:
        """Nothing to listen to: writers in this process call :meth:`notify`."""

    async def close(self) -> None:
        self.wake_all()
