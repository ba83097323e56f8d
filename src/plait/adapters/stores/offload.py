"""Keep a store's blocking I/O off the event loop thread, so that one slow fsync never
stalls the other sessions (and the lease heartbeats) a process serves from one loop.

:class:`IoThread` is one dedicated worker thread per store: calls run one at a time, in
the order they were submitted, and each hands its result back to the loop that asked for
it. It is cheaper than :func:`asyncio.to_thread` (no context copy, no executor, no
concurrent future) and, being FIFO, a commit submitted before another is applied before
it. The thread starts on the first call and stops when its store is closed (or after a
while without work, so a store that is never closed leaves no thread behind for long).

The SQLite store runs every call on its own :class:`IoThread`; :class:`Offloaded` gives a
store whose ``async`` methods block without ever suspending (the JSONL store) the same.
"""

from __future__ import annotations

import _thread
import asyncio
import contextlib
import functools
import queue
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

__all__ = ["IoThread", "Offloaded", "on_io_thread"]

T = TypeVar("T")

IDLE_SECONDS = 30.0
"""A worker thread with nothing to do for this long ends (the next call starts another)."""

_Item = tuple[Callable[[], Any], "asyncio.Future[Any]", asyncio.AbstractEventLoop]

_io_threads: set[int] = set()


def on_io_thread() -> bool:
    """Whether the calling thread is a store's I/O thread (for assertions and tests)."""
    return threading.get_ident() in _io_threads


def _settle(fut: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    if fut.done():  # the caller stopped waiting (cancelled)
        return
    if error is None:
        fut.set_result(result)
    else:
        fut.set_exception(error)


class IoThread:
    """One worker thread that runs blocking calls, in submission order, for a loop."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._queue: queue.SimpleQueue[_Item | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._running = False

    def __repr__(self) -> str:
        return f"IoThread({self._name!r}, running={self._running})"

    def submit(self, fn: Callable[[], T]) -> asyncio.Future[T]:
        """Queue ``fn`` at once (before the caller next yields) and return the future of
        its result, resolved on the running loop."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[T] = loop.create_future()
        with self._lock:
            self._queue.put((fn, fut, loop))
            self._start()
        return fut

    def start(self) -> None:
        """Start the thread now (else the first call does), e.g. while opening the store."""
        with self._lock:
            self._start()

    def _start(self) -> None:
        if not self._running:
            # Not threading.Thread: its start() waits until the new thread runs; this one
            # picks the queued calls up when it does.
            _thread.start_new_thread(self._work, ())
            self._running = True

    async def run(self, fn: Callable[[], T]) -> T:
        return await self.submit(fn)

    def stop(self) -> None:
        """End the thread once the calls queued so far have run."""
        with self._lock:
            if self._running:
                self._queue.put(None)
                self._running = False

    def _work(self) -> None:
        ident = threading.get_ident()
        _io_threads.add(ident)
        try:
            while self._next():
                pass
        finally:
            _io_threads.discard(ident)

    def _next(self) -> bool:
        try:
            item = self._queue.get(timeout=IDLE_SECONDS)
        except queue.Empty:
            with self._lock:
                if not self._queue.empty():
                    return True
                self._running = False
                return False
        if item is None:
            return False
        fn, fut, loop = item
        result: Any = None
        error: BaseException | None = None
        try:
            result = fn()
        except BaseException as e:  # handed to the caller, whatever it is
            error = e
        with contextlib.suppress(RuntimeError):  # a closed loop: nobody waits any more
            loop.call_soon_threadsafe(_settle, fut, result, error)
        return True


def _complete(coro: Coroutine[Any, Any, Any]) -> Any:
    try:
        coro.send(None)
    except StopIteration as done:
        return done.value
    coro.close()
    raise RuntimeError("an offloaded store call suspended; only blocking stores can be offloaded")


class Offloaded:
    """Wraps a store whose ``async`` methods block; every one of them runs on the wrapper's
    :class:`IoThread`. A store that keeps its I/O off the loop by itself (it has
    ``io_off_loop = True``, as the SQLite store) is passed through unchanged."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self._io = IoThread(f"plait-io-{type(inner).__name__}")

    def __repr__(self) -> str:
        return f"Offloaded({self._inner!r})"

    @property
    def inner(self) -> Any:
        return self._inner

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if getattr(self._inner, "io_off_loop", False) or not asyncio.iscoroutinefunction(attr):
            return attr
        io = self._io

        @functools.wraps(attr)
        async def call(*args: Any, **kwargs: Any) -> Any:
            coro = attr(*args, **kwargs)
            try:
                return await io.submit(functools.partial(_complete, coro))
            finally:
                if name == "close":
                    io.stop()

        return call
