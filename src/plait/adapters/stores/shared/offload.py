"""Keep a store's blocking I/O off the event loop thread, so that one slow fsync never
stalls the other sessions (and the lease heartbeats) a process serves from one loop.

:class:`IoThread` is one dedicated worker thread per store: calls run one at a time, in
the order they were submitted, and each hands its result back to the loop that asked for
it. It is cheaper than :func:`asyncio.to_thread` (no context copy, no executor, no
concurrent future) and, being FIFO, a commit submitted before another is applied before
it. The thread starts on the first call and stops when its store is closed (or after a
while without work, so a store that is never closed leaves no thread behind for long).

A call submitted with ``hold=True`` (a commit nobody waits for yet) hands its result back
together with the next call's when that one is already queued: a caller that queued a
commit behind it is woken once for both, not twice.

The SQLite store runs every call on its own :class:`IoThread`; :class:`Offloaded` gives a
store whose ``async`` methods block without ever suspending (the JSONL store) the same.

The hop costs one synchronous round trip between threads per call (100–300 µs here, more
than a whole durable step of the bare loop). It buys nothing when nothing else waits for
the event loop: a process that drives one run at a time (the CLI, the Python API) has no
other session to stall. So the mode is chosen, explicitly, by whoever composes the process
(:data:`IoMode`): ``"thread"`` for a process serving several runs (``plait serve``,
workers), ``"inline"`` for one that drives one run: :class:`InlineIo` runs each call at
once on the caller's thread, its future already resolved, in the same order.
"""

from __future__ import annotations

import _thread
import asyncio
import contextlib
import functools
import threading
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from plait.adapters.stores.shared.later import Later

if TYPE_CHECKING:
    import queue
else:  # with its C module, at the first I/O thread: a process driving one run has none
    queue = Later("queue", globals(), "queue")

__all__ = ["InlineIo", "IoMode", "IoThread", "Offloaded", "io_for", "on_io_thread"]

T = TypeVar("T")

IDLE_SECONDS = 30.0
"""A worker thread with nothing to do for this long ends (the next call starts another)."""

IoMode = Literal["thread", "inline"]
"""Where a store's blocking calls run: on its own I/O thread (a process serving several
runs: one slow fsync must not stall the others) or inline on the loop's thread (a process
driving one run: no hop per call)."""

_Item = tuple[Callable[[], Any], "asyncio.Future[Any]", asyncio.AbstractEventLoop, bool]
_Done = tuple["asyncio.Future[Any]", Any, BaseException | None]

_io_threads: set[int] = set()


def on_io_thread() -> bool:
    """Whether the calling thread is a store's I/O thread (for assertions and tests)."""
    return threading.get_ident() in _io_threads


def _settle(done: list[_Done]) -> None:
    for future, result, error in done:
        if future.done():  # the caller stopped waiting (cancelled)
            continue
        if error is None:
            future.set_result(result)
        else:
            future.set_exception(error)


class IoThread:
    """One worker thread that runs blocking calls, in submission order, for a loop."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._queue: queue.SimpleQueue[_Item | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._running = False

    def __repr__(self) -> str:
        return f"IoThread({self._name!r}, running={self._running})"

    def submit(self, call: Callable[[], T], *, hold: bool = False) -> asyncio.Future[T]:
        """Queue ``call`` at once (before the caller next yields) and return the future of
        its result, resolved on the running loop. ``hold``: its result may wait for the
        next call's, if one is queued by the time it finishes (see above)."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        with self._lock:
            self._queue.put((call, future, loop, hold))
            self._start()
        return future

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

    async def run(self, call: Callable[[], T]) -> T:
        return await self.submit(call)

    def stop(self) -> None:
        """End the thread once the calls queued so far have run."""
        with self._lock:
            if self._running:
                self._queue.put(None)
                self._running = False

    def _work(self) -> None:
        ident = threading.get_ident()
        _io_threads.add(ident)
        held: list[tuple[asyncio.AbstractEventLoop, _Done]] = []
        try:
            while self._next(held):
                pass
        finally:
            _hand_back(held)
            _io_threads.discard(ident)

    def _next(self, held: list[tuple[asyncio.AbstractEventLoop, _Done]]) -> bool:
        """Run the next call and hand its result back (with those held), or hold it.
        False: the thread ends."""
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
        call, future, loop, hold = item
        result: Any = None
        error: BaseException | None = None
        try:
            result = call()
        except BaseException as raised:  # handed to the caller, whatever it is
            error = raised
        held.append((loop, (future, result, error)))
        if not (hold and not self._queue.empty()):
            _hand_back(held)
        return True


class InlineIo:
    """:class:`IoThread`'s interface, each call run at once on the caller's thread (the
    event loop's): its future is resolved when :meth:`submit` returns, so awaiting it never
    suspends. For a process that drives one run (see :data:`IoMode`)."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __repr__(self) -> str:
        return f"InlineIo({self._name!r})"

    def submit(self, call: Callable[[], T], *, hold: bool = False) -> asyncio.Future[T]:
        """Run ``call`` now; its result (or error) in a resolved future. ``hold`` changes
        nothing: there is no wake-up to save."""
        future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        try:
            future.set_result(call())
        except Exception as error:  # handed to the caller, as the I/O thread does
            future.set_exception(error)
        return future

    async def run(self, call: Callable[[], T]) -> T:
        return call()

    def start(self) -> None:
        """Nothing to start."""

    def stop(self) -> None:
        """Nothing to stop."""


def io_for(mode: IoMode, name: str) -> IoThread | InlineIo:
    """The executor of ``mode`` for a store named ``name``."""
    if mode == "thread":
        return IoThread(name)
    if mode == "inline":
        return InlineIo(name)
    raise ValueError(f"unknown store I/O mode {mode!r} (expected 'thread' or 'inline')")


def _hand_back(held: list[tuple[asyncio.AbstractEventLoop, _Done]]) -> None:
    """Resolve the held results' futures, in order, one wake-up per loop."""
    by_loop: dict[asyncio.AbstractEventLoop, list[_Done]] = {}
    for loop, done in held:
        by_loop.setdefault(loop, []).append(done)
    held.clear()
    for loop, batch in by_loop.items():
        with contextlib.suppress(RuntimeError):  # a closed loop: nobody waits any more
            loop.call_soon_threadsafe(_settle, batch)


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

    def commit_soon(
        self, commit: Any, *, after: Callable[[], None] | None = None, hold: bool = False
    ) -> asyncio.Future[Any]:
        """``commit`` queued on the I/O thread at once (see
        :class:`~plait.application.ports.QueuedCommits`)."""
        inner = self._inner
        if getattr(inner, "io_off_loop", False):
            return inner.commit_soon(commit, after=after, hold=hold)  # type: ignore[no-any-return]
        coro = inner.commit(commit)

        def job() -> Any:
            result = _complete(coro)
            if after is not None:
                after()
            return result

        return self._io.submit(job, hold=hold)

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
