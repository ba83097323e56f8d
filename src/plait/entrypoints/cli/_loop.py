"""Running a command's coroutine: :func:`run` is ``asyncio.run`` with a Ctrl-C that always
wakes the event loop.

``asyncio.run`` handles SIGINT with a Python-level handler, and Python runs such a handler
on the main thread only when that thread next runs Python code. The kernel may deliver the
signal to any thread of the process (the store's I/O thread, an executor's): the main
thread, asleep in ``epoll_wait`` while a tool's ``sleep 60`` runs, then noticed the Ctrl-C
only when the tool ended. Here the signal also writes a byte to a socket the loop watches
(``signal.set_wakeup_fd``), whichever thread took it: the loop wakes, and asyncio's own
handler runs at once.

Everything else is ``asyncio.run``'s own behaviour, unchanged: the first Ctrl-C cancels
the command's task (a tool that was running is recorded as cancelled, or its outcome as
unknown) and ``KeyboardInterrupt`` is raised once the task has ended that way; a Ctrl-C
after the task has ended, or a second one, raises ``KeyboardInterrupt`` at once. (The
loop's own ``add_signal_handler`` would wake it too, but a Ctrl-C arriving as the command
ends is then dropped with the handler: a command interrupted then went on as if it had
not been.)
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import socket
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
    return asyncio.run(_woken_by_signals(main))


async def _woken_by_signals(main: Coroutine[Any, Any, T]) -> T:
    loop = asyncio.get_running_loop()
    reader, writer = socket.socketpair()
    reader.setblocking(False)
    writer.setblocking(False)

    def drain() -> None:  # the bytes only woke the loop; the handlers run on their own
        with contextlib.suppress(OSError):
            while reader.recv(256):
                pass

    loop.add_reader(reader.fileno(), drain)
    previous = signal.set_wakeup_fd(writer.fileno(), warn_on_full_buffer=False)
    try:
        return await main
    finally:
        signal.set_wakeup_fd(previous)
        loop.remove_reader(reader.fileno())
        reader.close()
        writer.close()
