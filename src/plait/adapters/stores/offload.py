"""Run an embedded store's calls on worker threads, so a server's event loop never waits
for SQLite (a commit's fsync takes milliseconds).

The SQLite store's ``async`` methods do their blocking work without ever suspending;
:class:`Offloaded` creates each call's coroutine on the loop and runs it to completion on
a thread (the store serializes access with its own lock). The CLI keeps the direct store:
one command, one caller, and a thread hop costs more than it saves there.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Coroutine
from typing import Any

__all__ = ["Offloaded"]


def _complete(coro: Coroutine[Any, Any, Any]) -> Any:
    try:
        coro.send(None)
    except StopIteration as done:
        return done.value
    coro.close()
    raise RuntimeError("an offloaded store call suspended; only blocking stores can be offloaded")


class Offloaded:
    """Wraps a blocking store; every ``async`` method runs on a worker thread."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def __repr__(self) -> str:
        return f"Offloaded({self._inner!r})"

    @property
    def inner(self) -> Any:
        return self._inner

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if not asyncio.iscoroutinefunction(attr):
            return attr

        @functools.wraps(attr)
        async def call(*args: Any, **kwargs: Any) -> Any:
            fn: Callable[..., Coroutine[Any, Any, Any]] = attr
            return await asyncio.to_thread(_complete, fn(*args, **kwargs))

        return call
