"""ToolGate: decisions are made before execution and recorded on the execution record."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from plait.application.gate import GateDecision, GateRequest, Verdict
from plait.application.ports import ModelResponse
from plait.domain.context import Context, Prefix
from plait.domain.errors import ValidationError
from plait.domain.messages import AssistantMessage, ToolStatus
from plait.domain.runs import RunStatus
from plait.domain.session import ExecutionState
from plait.domain.tools import EffectClass
from plait.testing import RecordingTool

from .conftest import call, make_rig, reply, run, shape, spec


@dataclass
class ScriptedGate:
    """Decides per tool name; records every request it saw."""

    verdicts: dict[str, GateDecision]
    requests: list[GateRequest] = field(default_factory=list)

    async def decide(self, request: GateRequest) -> GateDecision:
        self.requests.append(request)
        return self.verdicts.get(request.call.name, GateDecision.allow(by="test"))


def test_allowed_calls_record_the_decision() -> None:
    reader = RecordingTool(spec("read"), output="text")
    rig = make_rig([reply("", call("read", {"text": "a"}, "c1")), reply("done")], [reader])
    s = run(rig.service.create_session())
    result = run(rig.service.send(s.id, "go"))
    assert result.run.status is RunStatus.COMPLETED
    (record,) = run(rig.store.get_executions(result.run.id))
    assert record.state is ExecutionState.SETTLED
    assert record.decision == "allow" and record.decided_by == "default"
    assert record.decision_reason and record.reviewed_at is not None


def test_a_denied_call_never_executes_and_gets_a_denied_result() -> None:
    writer = RecordingTool(spec("write", EffectClass.SIDE_EFFECT))
    gate = ScriptedGate({"write": GateDecision.deny("writes are off today", by="policy:no-w")})
    rig = make_rig(
        [reply("", call("write", {"text": "x"}, "c1")), reply("ok, not written")],
        [writer],
        gate=gate,
    )
    s = run(rig.service.create_session())
    result = run(rig.service.send(s.id, "go"))
    assert result.run.status is RunStatus.COMPLETED
    assert writer.invocations == []
    rows = shape(rig.history(s.id))
    assert rows[2] == (
        3,
        "tool_result",
        "c1",
        "denied",
        "denied by policy:no-w: writes are off today",
    )
    (record,) = run(rig.store.get_executions(result.run.id))
    assert record.result_status is ToolStatus.DENIED
    assert record.decision == "deny" and record.decided_by == "policy:no-w"
    assert record.decision_reason == "writes are off today"
    assert record.started_at is None


def test_needs_approval_waits_with_the_reviewed_record_and_resume_asks_again() -> None:
    writer = RecordingTool(spec("write", EffectClass.SIDE_EFFECT), output="written")
    gate = ScriptedGate({"write": GateDecision.needs_approval("a person must ok it", by="p")})
    rig = make_rig(
        [reply("", call("write", {"text": "x"}, "c1")), reply("done")], [writer], gate=gate
    )
    s = run(rig.service.create_session())
    result = run(rig.service.send(s.id, "go"))
    assert result.run.status is RunStatus.AWAITING_APPROVAL
    assert result.run.lease is None
    assert result.run.error is not None and result.run.error.code == "approval_required"
    (record,) = run(rig.store.get_executions(result.run.id))
    assert record.state is ExecutionState.REVIEWED and record.decision == "needs_approval"
    assert writer.invocations == []
    # a recovering process leaves a waiting run alone
    (report,) = run(rig.service.recover(run_id=result.run.id))
    assert report.outcome == "skipped" and "awaiting_approval" in report.detail
    # approval arrives: the gate now allows; resume runs the call
    gate.verdicts.clear()
    resumed = run(rig.service.resume(result.run.id))
    assert resumed.run.status is RunStatus.COMPLETED
    assert len(writer.invocations) == 1
    (record,) = run(rig.store.get_executions(result.run.id))
    assert record.decision == "allow" and record.result_status is ToolStatus.SUCCEEDED


def test_cancel_ends_a_run_awaiting_approval_like_one_awaiting_resolution() -> None:
    writer = RecordingTool(spec("write", EffectClass.SIDE_EFFECT))
    gate = ScriptedGate({"write": GateDecision.needs_approval("ask first", by="p")})
    rig = make_rig([reply("", call("write", {"text": "x"}, "c1"))], [writer], gate=gate)
    s = run(rig.service.create_session())
    waiting = run(rig.service.send(s.id, "go")).run
    cancelled = run(rig.service.cancel(waiting.id))
    assert cancelled.status is RunStatus.CANCELLED
    rows = shape(rig.history(s.id))
    assert rows[-1][:4] == (3, "tool_result", "c1", "cancelled")
    assert "awaiting approval" in rows[-1][4]
    assert run(rig.store.get_session(s.id)).active_run_id is None


def test_the_gate_sees_the_call_spec_effect_session_and_run(tmp_path: Path) -> None:
    reader = RecordingTool(spec("read"))
    gate = ScriptedGate({})
    rig = make_rig([reply("", call("read", {"text": "a"}, "c1")), reply("ok")], [reader], gate=gate)
    s = run(rig.service.create_session(workspace=str(tmp_path), owner="ann"))
    result = run(rig.service.send(s.id, "go"))
    (request,) = gate.requests
    assert request.call.id == "c1" and request.spec.name == "read"
    assert request.effect is EffectClass.READ_ONLY
    assert request.session.owner == "ann" and request.session.workspace == str(tmp_path.resolve())
    assert request.run.id == result.run.id
    assert request.record.state is ExecutionState.REQUESTED


def test_the_gate_can_ask_the_reviewer_through_the_run_budget() -> None:
    reader = RecordingTool(spec("read"))

    @dataclass
    class ReviewingGate:
        answers: list[str] = field(default_factory=list)

        async def decide(self, request: GateRequest) -> GateDecision:
            ctx: Context[Any] = Context(
                instructions="review", tools=(), items=Prefix([]), output_type=AssistantMessage
            )
            response: ModelResponse = await request.reviewer(ctx)
            self.answers.append(response.text)
            return GateDecision.deny(response.text, by="reviewer:fn")

    gate = ReviewingGate()
    items = [reply("", call("read", {"text": "a"}, "c1")), reply("too risky"), reply("ok")]
    rig = make_rig(items, [reader], gate=gate)
    s = run(rig.service.create_session())
    result = run(rig.service.send(s.id, "go"))
    assert gate.answers == ["too risky"]
    assert [r.role for r in rig.turns.requests] == ["assistant", "reviewer", "assistant"]
    assert result.run.usage.model_calls == 3
    assert reader.invocations == []


def test_a_refusal_needs_a_reason() -> None:
    with pytest.raises(ValidationError):
        GateDecision(verdict=Verdict.DENY, reason=" ", decided_by="x")
