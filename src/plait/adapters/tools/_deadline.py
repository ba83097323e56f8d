"""When a file tool working in a thread must stop.

A worker thread cannot be killed: once the runner has reported a timeout (or the run was
cancelled) the thread would keep reading and matching for as long as its work lasts. So
every loop of the file tools asks its :class:`Deadline` between units of work (a line, a
file, a directory entry), and a unit of work is kept short: regular expressions run on
RE2, whose matching time is linear in the line and cannot backtrack
(see :mod:`plait.adapters.tools._search`).
"""

from __future__ import annotations

import threading
import time

from plait.domain.errors import ToolError

__all__ = ["CallStopped", "Deadline"]


class CallStopped(ToolError):
    """The call passed its time limit, or its caller stopped waiting for it."""


class Deadline:
    """``seconds`` from now (at most ``cap``: a call without a time limit is still
    bounded), or earlier if :meth:`stop` is called from the event loop."""

    __slots__ = ("_stop", "at", "seconds")

    def __init__(self, seconds: float | None, *, cap: float) -> None:
        self.seconds = cap if seconds is None else min(seconds, cap)
        self.at = time.monotonic() + self.seconds
        self._stop = threading.Event()

    def stop(self) -> None:
        """Called by the waiting side when it gave up (timeout or cancellation)."""
        self._stop.set()

    @property
    def stopped(self) -> bool:
        return self._stop.is_set()

    def passed(self) -> bool:
        return self._stop.is_set() or time.monotonic() >= self.at

    def check(self, what: str) -> None:
        """Raise :class:`CallStopped` once the deadline passed."""
        if self.passed():
            raise CallStopped(self.reason(what))

    def reason(self, what: str) -> str:
        if self._stop.is_set():
            return f"{what} was stopped: its caller stopped waiting for it"
        return f"{what} stopped at its time limit of {self.seconds:g} s"
