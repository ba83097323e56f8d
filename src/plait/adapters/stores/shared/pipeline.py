"""Commit pipelining for every store: :meth:`PipelinedCommits.commit_soon` queues a commit
at once and returns its future; commits queued this way are applied one after the other,
in the order they were queued, each after the previous one is durable (or failed).

A run uses it to keep writing while a commit of its own is still becoming durable: a tool's
result is written while the model works, and the next step's commit is queued behind it
instead of waiting for it (see :class:`~plait.application.ports.QueuedCommits`). The SQLite
store gets the same order from its I/O thread (FIFO) and implements ``commit_soon`` itself;
the memory, JSONL and PostgreSQL stores take this one.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from plait.application.ports import Commit, CommitResult

__all__ = ["PipelinedCommits"]


class PipelinedCommits:
    """A store mixin: :meth:`commit_soon` over the store's own ``commit``."""

    _last_queued: asyncio.Future[CommitResult] | None = None

    async def commit(self, commit: Commit) -> CommitResult:
        raise NotImplementedError  # the store's

    def commit_soon(
        self, commit: Commit, *, after: Callable[[], None] | None = None, hold: bool = False
    ) -> asyncio.Future[CommitResult]:
        """Queue ``commit`` now, behind the commits queued before it; the future resolves
        when it is durable (or fails). ``after`` runs once it is durable, before the next
        queued commit starts (a test's crash hook). ``hold`` (one wake-up for two results)
        has nothing to save here: each result is handed back on the loop already."""
        previous = self._last_queued
        queued = asyncio.ensure_future(self._after_previous(previous, commit, after))
        self._last_queued = queued
        return queued

    async def _after_previous(
        self,
        previous: asyncio.Future[CommitResult] | None,
        commit: Commit,
        after: Callable[[], None] | None,
    ) -> CommitResult:
        if previous is not None and not previous.done():
            # Its outcome is its caller's; this one only waits for its turn.
            await asyncio.wait((previous,))
        try:
            result = await self.commit(commit)
        finally:
            if self._last_queued is asyncio.current_task():
                self._last_queued = None  # nothing queued behind: keep no reference
        if after is not None:
            after()
        return result
