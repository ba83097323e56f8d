"""The run's budget checks (DESIGN §3): pure functions of the run's state and the time.

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


def check_cancel(a: ActiveRun) -> None:
    """Raise StopRun (``cancelled``) when the run was cancelled. Checked before any
    budget: a cancel has final priority."""
    if a.cancel_requested:
        raise StopRun(RunStatus.CANCELLED, "cancelled", "the run was cancelled")


def check_budget(a: ActiveRun, monotonic: float, caps: ModelCapabilities | None) -> None:
    """Raise StopRun when the run was cancelled (first), its deadline passed, or (``caps``
    given: before a model call) its model calls, cost or tokens are spent."""
    check_cancel(a)
    b, u = a.run.budget, a.usage
    if a.deadline is not None and monotonic >= a.deadline:
        raise StopRun.budget(
            "deadline", f"the run reached its deadline of {b.deadline_seconds:g} s"
        )
    if caps is None:
        return
    if b.max_model_calls is not None and u.model_calls >= b.max_model_calls:
        raise StopRun.budget("max_model_calls", f"the run used its {b.max_model_calls} model calls")
    if b.max_cost_usd is not None:
        spent = cost_usd(caps, u.input_tokens, u.output_tokens) or 0.0
        if spent >= b.max_cost_usd:
            raise StopRun.budget(
                "max_cost", f"the run spent ${spent:.4f} of its ${b.max_cost_usd:g} ceiling"
            )
    if b.max_total_tokens is not None and u.total_tokens >= b.max_total_tokens:
        raise StopRun.budget(
            "max_total_tokens",
            f"the run used {u.total_tokens} of its {b.max_total_tokens} tokens",
        )


def check_time_left(
    a: ActiveRun, monotonic: float, call: ToolCall, record: ExecutionRecord
) -> None:
    """A side effect is not started unless its whole timeout fits before the deadline:
    once started it runs under its own timeout (cutting it short would leave its outcome
    unknown), and the run ends at the deadline after it has settled."""
    limit = a.run.budget.tool_timeout_seconds
    if a.deadline is None or limit is None or record.effect is not EffectClass.SIDE_EFFECT:
        return
    left = a.deadline - monotonic
    if left < limit:
        raise StopRun.budget(
            "deadline",
            f"call {call.id} ({call.name}) was not started: {max(left, 0):.3g} s of the "
            f"run's deadline are left, less than the call's timeout of {limit:g} s",
        )
