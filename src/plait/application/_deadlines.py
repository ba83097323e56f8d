"""Time limits for the awaits a task makes one after another (a run's tool calls), with
one timer per task instead of one per await.

``asyncio.timeout`` arms a timer for every await and cancels it after: a timer handle
made, pushed on the loop's heap, cancelled, and swept from the heap later, for a limit
that almost never fires (a tool call's 60 s, for a call that takes microseconds): 2.5% of
the instructions of a step of W1 (docs/benchmarks.md). Here a task keeps one
timer, armed for the earliest limit it may have to enforce: an await sets its deadline and
clears it after (two attribute writes); the timer is re-armed only when an await's
deadline falls before it; when it fires between awaits it does nothing, and during an
await whose deadline is later it re-arms itself for that deadline.

The semantics are ``asyncio.timeout``'s: the task is cancelled when the deadline passes,
and the await's CancelledError becomes :class:`TimeoutError` unless the task had been
cancelled from elsewhere as well (``Task.cancelling``/``uncancel`` counted the same way).
An await made while another one of the same task is under a limit (a tool that runs a
run of its own, in the same task) falls back to ``asyncio.timeout``.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Awaitable
from typing import TypeVar

__all__ = ["within"]

T = TypeVar("T")


class _TaskLimit:
    """The time limit of one task's current await, and the task's timer."""

    __slots__ = ("__weakref__", "armed_for", "deadline", "expired", "loop", "task", "timer")

    def __init__(self, task: asyncio.Task[object], loop: asyncio.AbstractEventLoop) -> None:
        self.task = weakref.ref(task)  # the registry below is keyed by the task
        self.loop = loop
        self.deadline: float | None = None
        """The current await's (loop time); None between awaits."""
        self.timer: asyncio.TimerHandle | None = None
        self.armed_for = 0.0
        """The deadline the timer was armed for."""
        self.expired = False
        """This limit cancelled the task during the current await."""

    def begin(self, deadline: float) -> None:
        self.deadline = deadline
        self.expired = False
        if self.timer is None or self.armed_for > deadline:
            if self.timer is not None:
                self.timer.cancel()
            self._arm(deadline)

    def _arm(self, deadline: float) -> None:
        self.armed_for = deadline
        self.timer = self.loop.call_at(deadline, self._due)

    def _due(self) -> None:
        self.timer = None
        deadline = self.deadline
        if deadline is None:  # between awaits: nothing runs under a limit
            return
        if deadline > self.armed_for:  # armed for an earlier await: this one has longer
            self._arm(deadline)
            return
        task = self.task()
        if task is not None and not task.done():
            self.expired = True
            task.cancel()


_limits: weakref.WeakKeyDictionary[asyncio.Task[object], _TaskLimit] = weakref.WeakKeyDictionary()


async def within(seconds: float | None, awaitable: Awaitable[T]) -> T:
    """``awaitable``'s result, or TimeoutError once ``seconds`` have passed (``None``: no
    limit); as ``async with asyncio.timeout(seconds): return await awaitable``."""
    if seconds is None:
        return await awaitable
    task = asyncio.current_task()
    assert task is not None, "within() runs in a task"
    limit = _limits.get(task)
    if limit is None:
        limit = _limits[task] = _TaskLimit(task, asyncio.get_running_loop())
    elif limit.deadline is not None:  # nested in another limited await of this task
        async with asyncio.timeout(seconds):
            return await awaitable
    cancelling = task.cancelling()
    limit.begin(limit.loop.time() + seconds)
    try:
        return await awaitable
    except asyncio.CancelledError as error:
        if limit.expired:
            limit.expired = False
            if task.uncancel() <= cancelling:  # no cancel request but ours
                raise TimeoutError from error
        raise
    finally:
        limit.deadline = None
        if limit.expired:  # expired as the await ended without its CancelledError
            limit.expired = False
            task.uncancel()
