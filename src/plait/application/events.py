"""Progress events a run reports while it works (for spinners, logs and SSE streams).

Observers are called synchronously from the loop and must be quick; an observer that
raises does not stop the run.
"""

from __future__ import annotations

from typing import Literal, Protocol

from plait.domain.messages import ToolCall, Usage
from plait.domain.record import record
from plait.domain.runs import Run
from plait.domain.session import StoredMessage

__all__ = [
    "CompactionEvent",
    "MessageSaved",
    "ModelCallEnded",
    "ModelCallStarted",
    "RecoveryEvent",
    "ReviewEvent",
    "RunEnded",
    "RunEvent",
    "RunObserver",
    "RunStarted",
    "ToolDecided",
    "ToolStarted",
]


@record
class RunStarted:
    run: Run


@record
class ModelCallStarted:
    run_id: str
    step: int
    attempt: int
    role: str = "assistant"
    """``assistant`` or ``reviewer`` (the ModelCaller's role)."""


@record(kw_only=True)
class ModelCallEnded:
    """One model call attempt came back (``error_code``: empty on success, else the
    ModelError's code in lower case, e.g. ``transient``; a retry follows when it is
    retryable and attempts are left)."""

    run_id: str
    step: int
    attempt: int
    role: str
    model: str
    """The model the call was sent to (its name)."""
    response_model: str | None = None
    usage: Usage | None = None
    tool_calls: int = 0
    error_code: str = ""


@record
class MessageSaved:
    run_id: str
    stored: StoredMessage


@record
class ToolDecided:
    """The ToolGate's decision about a call, as recorded on its execution record
    (``verdict``: allow, deny or needs_approval; ``decided_by``: ``policy:<rule>``,
    ``reviewer:<model>``, ``user:<name>``, ...)."""

    run_id: str
    call: ToolCall
    verdict: str
    decided_by: str
    reason: str


@record
class ToolStarted:
    run_id: str
    call: ToolCall
    effect: str = ""
    """The call's effect class (``read_only``, ``idempotent``, ``side_effect``)."""


@record
class RunEnded:
    run: Run


@record(kw_only=True)
class CompactionEvent:
    """An automatic compaction in a run (docs/design.md#compaction): ``started`` before the
    summarizer is asked; then ``activated`` (a new summary is in the context; ``insufficient``: the
    context is still over the threshold), ``failed`` (``detail`` says why; the previous
    summary stays) or ``skipped`` (nothing could be compacted, or the run's cap is
    reached; said once per run)."""

    run_id: str
    phase: Literal["started", "activated", "failed", "skipped"]
    trigger: str
    """``pressure`` (post-step checkpoint) or ``overflow`` (the provider's
    ``CONTEXT_WINDOW_EXCEEDED``)."""
    step: int
    detail: str = ""
    generation: int = 0
    """The session's summary generation after the event."""
    covered_through_seq: int | None = None
    tokens_before: int | None = None
    tokens_after: int | None = None
    insufficient: bool = False


@record(kw_only=True)
class ReviewEvent:
    """The Reviewer role judging one call: ``started`` before its first model call, then
    ``decided`` with its decision (``allow``, ``deny``, ``ask_user``; empty when the
    run's stop ended the review) and why. ``error_code``: set when the review itself went
    wrong (``model_timeout``, ``invalid_model_output``, ``budget_exhausted``, the model
    call's failure code, ...) and the decision is the fail-closed ``ask_user``."""

    run_id: str
    call: ToolCall
    phase: Literal["started", "decided"]
    reviewer: str
    """The reviewer's name (its model's, once a response names it)."""
    verdict: str = ""
    reason: str = ""
    model_calls: int = 0
    error_code: str = ""


@record(kw_only=True)
class RecoveryEvent:
    """Recovery of a run taken over from a stopped process
    (docs/design.md#recovery-without-repeating-side-effects): ``started`` once the last persisted
    point is read (the open calls of its last assistant message, classed by how they are settled:
    run again, run again with the same idempotency key, settled ``unknown``, or never started and
    run now; only a side effect's start is written, so the others are run again whether or not they
    had started), then
    ``settled`` when those calls are paired (``status``: the run's status then;
    ``running``: the loop goes on)."""

    run_id: str
    phase: Literal["started", "settled"]
    session_version: int = 0
    """The session's version recovery continues from (its last persisted point)."""
    pending: int = 0
    """Calls of the last assistant message without a result."""
    rerun: int = 0
    """``read_only`` calls: run again."""
    idempotent: int = 0
    """``idempotent`` calls: run again with the same idempotency key."""
    unknown: int = 0
    """``side_effect`` calls that had started (or were left ``unknown``): settled
    ``unknown``, the run waits for a person (the calls after the first are not reached)."""
    not_started: int = 0
    """``side_effect`` calls that never started: they run now."""
    status: str = ""
    error_code: str = ""


RunEvent = (
    RunStarted
    | ModelCallStarted
    | ModelCallEnded
    | MessageSaved
    | ToolDecided
    | ToolStarted
    | RunEnded
    | CompactionEvent
    | ReviewEvent
    | RecoveryEvent
)


class RunObserver(Protocol):
    def __call__(self, event: RunEvent, /) -> None: ...
