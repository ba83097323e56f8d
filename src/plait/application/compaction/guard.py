"""The run's side of an auxiliary model call made by compaction (the summarizer).

The run that triggers a compaction passes a :class:`CallGuard`: every summarizer call is
checked against the run's cancellation and budgets *before* it is made and counted in the
run's usage (the article §四: review, correction and compaction calls come out of the same
budget), and runs under the run's cancellation signal, so a cancel interrupts it. A
manual compaction (``plait compact``) has no run and no guard.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Protocol

from plait.domain.messages import Usage

__all__ = ["CallGuard"]


class CallGuard(Protocol):
    def before_call(self) -> None:
        """Raise (the run's stop) when the run was cancelled or a budget is spent; else
        count one model call to the run."""
        ...

    def after_call(self, usage: Usage) -> None:
        """Add the call's reported tokens to the run's usage."""
        ...

    def interruptible(self) -> AbstractContextManager[None]:
        """The call runs inside this: a cancel of the run interrupts it (and leaves as
        the run's stop, never as a failure of the summary)."""
        ...
