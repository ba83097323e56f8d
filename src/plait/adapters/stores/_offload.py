"""Run a store's blocking I/O on one dedicated thread per store, off the event loop.

A store class whose public ``async def`` methods never suspend (their bodies are plain
blocking calls: SQLite, file writes with fsync) is passed to :func:`offload`. Each such
method then hands its whole body to the store's own single worker thread and awaits the
result, so one slow fsync stalls only that store's queue, never the other sessions served
by the same event loop. One thread per store keeps the calls of a store in order (the
store's connection is used by that thread only) and costs one hand-off per call.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
from collections.abc import Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

__all__ = ["IoThread", "offload"]

C = TypeVar("C", bound=type)


class IoThread:
    """The worker thread of one store (started on first use)."""

    __slots__ = ("_executor", "_name")

    def __init__(self, name: str) -> None:
        self._name = name
        self._executor: ThreadPoolExecutor | None = None

    async def run(self, coro: Coroutine[Any, Any, Any]) -> Any:
        if self._executor is None:
            self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=self._name)
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, _complete, coro)

    def shutdown(self) -> None:
        executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=False)


def _complete(coro: Coroutine[Any, Any, Any]) -> Any:
    """Drive a coroutine that does not suspend to its end, on this thread."""
    try:
        coro.send(None)
    except StopIteration as done:
        return done.value
    coro.close()
    raise RuntimeError("an offloaded store method suspended; it must not await")


def offload(cls: C) -> C:
    """Make every public coroutine method of ``cls`` run on the instance's ``_io``
    (:class:`IoThread`) thread; ``close`` also stops the thread afterwards."""
    for name, fn in list(vars(cls).items()):
        if name.startswith("_") or not inspect.iscoroutinefunction(fn):
            continue
        setattr(cls, name, _wrap(fn, closing=name == "close"))
    return cls


def _wrap(
    fn: Callable[..., Coroutine[Any, Any, Any]], *, closing: bool
) -> Callable[..., Coroutine[Any, Any, Any]]:
    @functools.wraps(fn)
    async def on_io_thread(self: Any, *args: Any, **kwargs: Any) -> Any:
        io: IoThread = self._io
        try:
            return await io.run(fn(self, *args, **kwargs))
        finally:
            if closing:
                io.shutdown()

    on_io_thread.offloaded = True  # type: ignore[attr-defined]
    return on_io_thread
