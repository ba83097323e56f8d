"""ToolGate: the one place that decides, per validated call and before anything executes,
whether the call may run (docs/design.md#governance).

The driver asks the gate about every call, in order, right before the call would start.
The decision and its reason are recorded on the call's execution record
(``ExecutionRecord.decision``, ``decided_by``, ``decision_reason``, ``reviewed_at``):

- ``allow``: the call runs;
- ``deny``: the call gets a ``denied`` ToolResult carrying the reason; the executor is
  never called; the run goes on (the model sees the denial);
- ``needs_approval``: the record is written in the ``reviewed`` state and the run waits
  in ``awaiting_approval`` (the lease released, the session kept). ``resume`` asks the gate
  again, so a gate that finds a matching approval lets the call run then.

Governance implements the real gate over :class:`ToolGate`; :class:`AllowAll` is the
default: everything that validated runs.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from enum import StrEnum
from typing import Any, Protocol, cast

from plait.application.events import ReviewEvent
from plait.application.ports import ModelClient, ModelResponse
from plait.domain.context import Context
from plait.domain.errors import ValidationError
from plait.domain.messages import Message, ToolCall
from plait.domain.record import record
from plait.domain.runs import Run
from plait.domain.session import ExecutionRecord, Session
from plait.domain.tools import EffectClass, ToolSpec

__all__ = [
    "ALLOWED",
    "AllowAll",
    "GateDecision",
    "GateRequest",
    "ReviewerCall",
    "ToolGate",
    "Verdict",
    "policy_of",
    "reviewer_model_of",
    "reviewer_of",
]


class Verdict(StrEnum):
    ALLOW = "allow"
    DENY = "deny"
    NEEDS_APPROVAL = "needs_approval"


@record(kw_only=True)
class GateDecision:
    verdict: Verdict
    reason: str
    decided_by: str
    """Who decided: ``default``, ``policy:<rule>``, ``reviewer:<model>``, ``user:<name>``."""

    def __post_init__(self) -> None:
        if self.verdict is not Verdict.ALLOW and not self.reason.strip():
            raise ValidationError(f"a {self.verdict.value} decision needs a reason")

    @classmethod
    def allow(cls, reason: str = "allowed", *, by: str) -> GateDecision:
        return cls(verdict=Verdict.ALLOW, reason=reason, decided_by=by)

    @classmethod
    def deny(cls, reason: str, *, by: str) -> GateDecision:
        return cls(verdict=Verdict.DENY, reason=reason, decided_by=by)

    @classmethod
    def needs_approval(cls, reason: str, *, by: str) -> GateDecision:
        return cls(verdict=Verdict.NEEDS_APPROVAL, reason=reason, decided_by=by)


class ReviewerCall(Protocol):
    """Ask the model in the ``reviewer`` role. Goes through the run's ModelCaller: the call is
    retried by the error policy and every attempt counts against the run's model-call budget
    and deadline. ``time_limit`` (seconds) bounds the call (a late answer is a failure). Raises what
    ModelCaller raises (the driver ends the run on those)."""

    def __call__(
        self, context: Context[Any], *, time_limit: float | None = None
    ) -> Awaitable[ModelResponse]: ...


@record(kw_only=True)
class GateRequest:
    """Everything a gate may need to decide about one call."""

    call: ToolCall
    """The validated call (arguments match the spec's schema)."""
    spec: ToolSpec
    effect: EffectClass
    """This call's effect class (may be narrower than ``spec.effect``, see ``Tool.effect_of``)."""
    record: ExecutionRecord
    """The call's execution record as stored (its ``args_digest`` binds an approval)."""
    session: Session
    """Id, owner and workspace of the session the call runs in."""
    run: Run
    """The run as last committed (id, budget; usage as of the last commit)."""
    reviewer: ReviewerCall
    history: Sequence[Message] = ()
    """The session's history up to and including the call's assistant message (read
    only): what a reviewer needs to judge the call against the user's constraints."""
    on_review: Callable[[ReviewEvent], None] | None = None
    """Where a gate that asks the Reviewer role reports its review (the run's events)."""


class ToolGate(Protocol):
    async def decide(self, request: GateRequest) -> GateDecision: ...


class AllowAll:
    """The default gate: every validated call runs (the driver does not even build the
    request for it)."""

    async def decide(self, request: GateRequest) -> GateDecision:
        return ALLOWED


ALLOWED = GateDecision.allow("no policy configured; every valid call is allowed", by="default")
"""What :class:`AllowAll` decides about every call."""


def policy_of(gate: ToolGate) -> str | None:
    """The source of the tool policy ``gate`` decides by (recorded as ``Run.policy``)."""
    source = getattr(gate, "policy_source", None)
    return source if isinstance(source, str) else None


def reviewer_of(gate: ToolGate, run_model: ModelClient) -> tuple[ModelClient, int | None] | None:
    """The model that reviews calls under ``gate`` (its own reviewer model, else the
    run's) and the output tokens the reviewer asks of it; ``None`` when the gate never asks
    a reviewer."""
    if getattr(gate, "reviews", False) is not True:
        return None
    asked = getattr(gate, "reviewer_max_output_tokens", None)
    return reviewer_model_of(gate) or run_model, asked if isinstance(asked, int) else None


def reviewer_model_of(gate: ToolGate) -> ModelClient | None:
    """The reviewer's own model under ``gate`` (``None``: it uses the run's model)."""
    return cast("ModelClient | None", getattr(gate, "reviewer_model", None))
