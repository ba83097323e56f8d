"""A run's status, alone: what stores name in their SQL and queries filter on, without the
run's dataclasses (:mod:`plait.domain.runs` re-exports it)."""

from __future__ import annotations

from enum import StrEnum

__all__ = ["RunStatus"]


class RunStatus(StrEnum):
    QUEUED = "queued"
    """Service mode: stored with its user message, not yet claimed by a worker."""
    RUNNING = "running"
    AWAITING_APPROVAL = "awaiting_approval"
    AWAITING_RESOLUTION = "awaiting_resolution"
    """A side effect is ``unknown``: a person must say what happened."""
    COMPLETED = "completed"
    BUDGET_EXHAUSTED = "budget_exhausted"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def terminal(self) -> bool:
        return self in _TERMINAL


_TERMINAL = frozenset(
    {RunStatus.COMPLETED, RunStatus.BUDGET_EXHAUSTED, RunStatus.FAILED, RunStatus.CANCELLED}
)
