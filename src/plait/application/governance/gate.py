"""The real :class:`~plait.application.gate.ToolGate`: policy → reviewer → person.

Adapts the :class:`~plait.application.governance.governor.Governor` to the driver's gate
protocol. The reviewer reaches its model through the run's ModelCaller (``request.reviewer``)
so its calls count against the run's budget and deadline; a model failure there becomes
``ask_user`` (fail closed), while the run's own stop signals (budget exhausted, cancelled)
still end the run. The decision trail (policy, reviewer, person) is written into the
recorded reason.
"""

from __future__ import annotations

from typing import Any

from plait.application._run_state import StopRun
from plait.application.gate import GateDecision, GateRequest
from plait.application.governance.governor import GateOutcome, Governor
from plait.application.ports import ModelClient, ModelResponse
from plait.domain.context import Context
from plait.domain.governance import Verdict
from plait.domain.runs import RunStatus

__all__ = ["GovernedGate"]


class _ReviewerFailed(Exception):
    """The reviewer's model call failed (after the caller's retries): ``ask_user``."""

    def __init__(self, message: str, code: str) -> None:
        super().__init__(message)
        self.code = code


class GovernedGate:
    """A ToolGate over a Governor."""

    def __init__(self, governor: Governor) -> None:
        self.governor = governor
        if governor.reviewer is not None:
            governor.reviewer.propagate = (StopRun,)

    @property
    def reviews(self) -> bool:
        """Whether the policy can send a call to the Reviewer role."""
        return self.governor.policy.reviews

    @property
    def reviewer_model(self) -> ModelClient | None:
        """The reviewer's own model (``[reviewer] model``); ``None``: the run's model."""
        reviewer = self.governor.reviewer
        return None if reviewer is None else reviewer.model

    @property
    def reviewer_max_output_tokens(self) -> int:
        return self.governor.policy.reviewer.max_output_tokens

    @property
    def policy_source(self) -> str:
        """Where this gate's policy comes from (recorded on the runs it governs)."""
        return self.governor.policy.source

    async def decide(self, request: GateRequest) -> GateDecision:
        ask_run = request.reviewer

        async def ask(context: Context[Any], *, time_limit: float | None = None) -> ModelResponse:
            try:
                return await ask_run(context, time_limit=time_limit)
            except StopRun as stop:
                if stop.status is RunStatus.FAILED:
                    raise _ReviewerFailed(stop.error.message, stop.error.code) from None
                raise

        budget, usage = request.run.budget, request.run.usage
        left = (
            None if budget.max_model_calls is None else budget.max_model_calls - usage.model_calls
        )
        outcome = await self.governor.check(
            session_id=request.session.id,
            run_id=request.run.id,
            workspace=request.session.workspace,
            call=request.call,
            spec=request.spec,
            effect=request.effect,
            history=request.history,
            calls_so_far=usage.tool_calls,
            model_calls_left=left,
            ask=ask,
            lease_token=request.run.lease_token,
            report=request.on_review,
        )
        return _decision(outcome)


_SAID = {Verdict.ALLOW: "allowed it", Verdict.DENY: "denied it", Verdict.ASK_USER: "asked a person"}
"""How the deciders before the last one are named in a decision's reason."""


def _decision(outcome: GateOutcome) -> GateDecision:
    decision = outcome.decision
    reason = decision.reason
    if len(outcome.trail) > 1:
        before = "; ".join(f"{x.label()} {_SAID[x.verdict]}" for x in outcome.trail[:-1])
        reason = f"{reason} ({before})"
    if outcome.outcome == "allow":
        return GateDecision.allow(reason or "allowed", by=decision.label())
    if outcome.outcome == "deny":
        return GateDecision.deny(reason, by=decision.label())
    assert outcome.approval is not None
    approval = outcome.approval
    return GateDecision.needs_approval(
        f"{approval.reason}; approve with `plait approvals approve {approval.id}` or deny with "
        f"`plait approvals deny {approval.id} --reason TEXT`",
        by=decision.label(),
    )
