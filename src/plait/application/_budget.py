"""The run's budget checks (docs/design.md#persist-before-acting): pure functions of the run's state
and the time.

A spent budget ends the run (``budget_exhausted``), never the session, and never leaves an
outcome unknown: a side effect starts only when its whole timeout fits before the
deadline, and once started it runs under its own timeout.
"""

from __future__ import annotations

from plait.application._run_state import ActiveRun, StopRun
from plait.application.model_caller import cost_usd
from plait.application.ports import ModelCapabilities
from plait.domain.messages import ToolCall
from plait.domain.runs import RunStatus
from plait.domain.session import ExecutionRecord
from plait.domain.tools import EffectClass

__all__ = ["check_budget", "check_cancel", "check_time_left"]


def check_cancel(active: ActiveRun) -> None:
    """Raise StopRun (``cancelled``) when the run was cancelled. Checked before any
    budget: a cancel has final priority."""
    if active.cancel_requested:
        raise StopRun(RunStatus.CANCELLED, "cancelled", "the run was cancelled")


def check_budget(active: ActiveRun, monotonic: float, caps: ModelCapabilities | None) -> None:
    """Raise StopRun when the run was cancelled (first), its deadline passed, or (``caps``
    given: before a model call) its model calls, cost or tokens are spent."""
    check_cancel(active)
    budget, usage = active.run.budget, active.usage
    if active.deadline is not None and monotonic >= active.deadline:
        raise StopRun.budget(
            "deadline", f"the run reached its deadline of {budget.deadline_seconds:g} s"
        )
    if caps is None:
        return
    if budget.max_model_calls is not None and usage.model_calls >= budget.max_model_calls:
        raise StopRun.budget(
            "max_model_calls", f"the run used its {budget.max_model_calls} model calls"
        )
    if budget.max_cost_usd is not None:
        spent = cost_usd(caps, usage.input_tokens, usage.output_tokens) or 0.0
        if spent >= budget.max_cost_usd:
            raise StopRun.budget(
                "max_cost", f"the run spent ${spent:.4f} of its ${budget.max_cost_usd:g} ceiling"
            )
    if budget.max_total_tokens is not None and usage.total_tokens >= budget.max_total_tokens:
        raise StopRun.budget(
            "max_total_tokens",
            f"the run used {usage.total_tokens} of its {budget.max_total_tokens} tokens",
        )


def check_time_left(
    active: ActiveRun, monotonic: float, call: ToolCall, record: ExecutionRecord
) -> None:
    """A side effect is not started unless its whole timeout fits before the deadline:
    once started it runs under its own timeout (cutting it short would leave its outcome
    unknown), and the run ends at the deadline after it has settled."""
    limit = active.run.budget.tool_timeout_seconds
    if active.deadline is None or limit is None or record.effect is not EffectClass.SIDE_EFFECT:
        return
    left = active.deadline - monotonic
    if left < limit:
        raise StopRun.budget(
            "deadline",
            f"call {call.id} ({call.name}) was not started: {max(left, 0):.3g} s of the "
            f"run's deadline are left, less than the call's timeout of {limit:g} s",
        )
