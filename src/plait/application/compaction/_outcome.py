"""What a compaction came to, and the per-run counters of the RFC's triggers."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from plait.domain.compaction import Trigger
from plait.domain.record import record
from plait.domain.summary import Summary

if TYPE_CHECKING:
    from plait.application.compaction._context import ContextView, ViewBasis
    from plait.application.compaction._summarizer import SummarizeResult

__all__ = ["CompactionOutcome", "RunCompaction", "Status", "outcome"]

Status = Literal["compacted", "not_needed", "nothing_to_compact", "failed", "superseded", "skipped"]


@record(kw_only=True)
class CompactionOutcome:
    status: Status
    detail: str
    trigger: Trigger
    generation_before: int
    generation_after: int
    summary: Summary | None = None
    """The summary activated by this compaction (``compacted``), else ``None``."""
    measured_tokens: int | None = None
    """The context's tokens before compacting (pressure and manual), corrected by the
    meter's calibration."""
    tokens_after: int | None = None
    threshold_tokens: int | None = None
    insufficient: bool = False
    """Compacted, but the context is still at or over the threshold (an indivisible unit
    is too large): said once, never retried in a loop."""
    summarizer_calls: int = 0
    summarizer_input_tokens: int = 0
    summarizer_output_tokens: int = 0

    @property
    def surface_changed(self) -> bool:
        return self.generation_after > self.generation_before


@dataclass(slots=True)
class RunCompaction:
    """Per-run counters: compactions done, overflow recoveries tried, what was said."""

    compactions: int = 0
    overflow_attempts: int = 0
    warned: set[str] = field(default_factory=set)
    last_measured: int = 0
    """The meter's count of the run's latest assistant request (for calibration)."""
    measured: ContextView | None = None
    """The view the post-step check measured without compacting: the next step's call
    reuses it if nothing it was built from changed meanwhile (taken by that call)."""
    read: ViewBasis | None = None
    """What the view of the step in flight was built from (its summary and constraints,
    read when the step began): the post-answer check of that step builds on it instead
    of reading again (taken by that check)."""
    since: float | None = None
    """When the run started: the stored summaries made since are its compactions."""
    counted: bool = False
    """``compactions`` was counted from the stored summaries since this process last
    took the run over (``since`` given; see ``CompactionService.at_cap``)."""


def outcome(
    status: Status,
    detail: str,
    trigger: Trigger,
    gen: int,
    view: ContextView | None = None,
    result: SummarizeResult | None = None,
) -> CompactionOutcome:
    return CompactionOutcome(
        status=status,
        detail=detail,
        trigger=trigger,
        generation_before=gen,
        generation_after=gen,
        measured_tokens=None if view is None else view.corrected_total,
        threshold_tokens=None if view is None else view.threshold_tokens,
        summarizer_calls=0 if result is None else result.calls,
        summarizer_input_tokens=0 if result is None else result.input_tokens,
        summarizer_output_tokens=0 if result is None else result.output_tokens,
    )
