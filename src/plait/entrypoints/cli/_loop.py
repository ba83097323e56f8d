"""Running a command's coroutine: :func:`run` is ``asyncio.run`` with a Ctrl-C that always
wakes the event loop.

``asyncio.run`` handles SIGINT with a Python-level handler, and Python runs such a handler
on the main thread only when that thread next runs Python code. The kernel may deliver the
signal to any thread of the process (the store's I/O thread, an executor's): the main
thread, asleep in ``epoll_wait`` while a tool's ``sleep 60`` runs, then notices the Ctrl-C
only when the tool ends. The loop's own signal handling (``loop.add_signal_handler``) also
writes the signal to the loop's wake-up pipe, whichever thread took it, so the run is
cancelled at once.

The rest is ``asyncio.run``'s behaviour: the first Ctrl-C cancels the command's task (a
tool that was running is recorded as cancelled, or its outcome as unknown) and
``KeyboardInterrupt`` is raised once the task has ended that way; a second Ctrl-C raises
``KeyboardInterrupt`` at once.
"""

from __future__ import annotations

import asyncio
import signal
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

__all__ = ["run"]

T = TypeVar("T")


def run(main: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run(main)``; Ctrl-C cancels ``main`` even while the loop sleeps."""
    # As asyncio.run itself decides: only the main thread can own SIGINT, and a process
    # started with SIGINT ignored (a background job of a script) keeps ignoring it.
    if (
        threading.current_thread() is not threading.main_thread()
        or signal.getsignal(signal.SIGINT) is not signal.default_int_handler
    ):
        return asyncio.run(main)
    return asyncio.run(_interruptible(main))


async def _interruptible(main: Coroutine[Any, Any, T]) -> T:
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    assert task is not None  # asyncio.run's own task
    pressed = 0

    def on_sigint() -> None:
        nonlocal pressed
        pressed += 1
        if pressed > 1:
            raise KeyboardInterrupt
        task.cancel()

    loop.add_signal_handler(signal.SIGINT, on_sigint)
    try:
        return await main
    except asyncio.CancelledError:
        if pressed:
            raise KeyboardInterrupt from None
        raise
    finally:
        # restores Python's default handler (and clears the wake-up fd)
        loop.remove_signal_handler(signal.SIGINT)
