"""Budgets: an absolute deadline that survives a crash, side effects never cut short by
it, a cost ceiling from the model's prices, and the run's model reopened by its spec."""

from __future__ import annotations

from typing import Any

import pytest

from plait.adapters.stores.memory.store import MemoryStore
from plait.application.ports import ModelCapabilities, ToolInvocation
from plait.domain.errors import ConfigError
from plait.domain.runs import Budget, RunStatus
from plait.domain.tools import EffectClass
from plait.testing import FixedClock, FunctionModel, RecordingTool
from tests.application.conftest import Turns, call, make_rig, reply, run, shape, spec
from tests.application.test_recovery import Died, _ids, die_at


def test_a_deadline_set_before_a_crash_ends_the_recovered_run_at_the_original_time() -> None:
    store, clock = MemoryStore(), FixedClock()
    budget = Budget(deadline_seconds=100)
    first = make_rig(
        [reply("x")], store=store, clock=clock, budget=budget, checkpoint=die_at("user_saved")
    )
    s = run(first.service.create_session())
    with pytest.raises(Died):
        run(first.service.send(s.id, "go"))
    (crashed,) = run(store.list_runs())
    assert crashed.deadline_at == clock.now() + 100
    clock.advance(61)  # lease expired, 39 s of the deadline left: recovery goes on
    echo = RecordingTool(spec("echo"))

    def slow(request: object) -> object:
        clock.advance(40)  # the original deadline passes while the model thinks
        return reply("", call("echo", {"text": "a"}, "c1"))

    second = make_rig([slow], [echo], store=store, clock=clock, ids=_ids())
    second.service.owner = "worker-2"
    (report,) = run(second.service.recover())
    assert report.result is not None
    ended = report.result.run
    assert ended.status is RunStatus.BUDGET_EXHAUSTED
    assert ended.error is not None and ended.error.code == "deadline"
    assert ended.deadline_at == crashed.deadline_at
    assert echo.invocations == []  # the call was not started past the deadline


def test_a_recovered_run_past_its_deadline_does_not_call_the_model() -> None:
    store, clock = MemoryStore(), FixedClock()
    first = make_rig(
        [],
        store=store,
        clock=clock,
        budget=Budget(deadline_seconds=30),
        checkpoint=die_at("user_saved"),
    )
    s = run(first.service.create_session())
    with pytest.raises(Died):
        run(first.service.send(s.id, "go"))
    clock.advance(61)
    second = make_rig([], store=store, clock=clock, ids=_ids())
    (report,) = run(second.service.recover())
    assert report.result is not None
    assert report.result.run.status is RunStatus.BUDGET_EXHAUSTED
    assert second.turns.requests == []
    assert run(store.get_session(s.id)).active_run_id is None  # the session is free


def test_a_side_effect_is_not_started_when_its_timeout_does_not_fit() -> None:
    clock = FixedClock()

    def slow_read(inv: ToolInvocation) -> str:
        clock.advance(50)
        return "read"

    reader = RecordingTool(spec("read"), fn=slow_read)
    writer = RecordingTool(spec("write", EffectClass.SIDE_EFFECT))
    rig = make_rig(
        [reply("", call("read", {"text": "a"}, "c1"), call("write", {"text": "b"}, "c2"))],
        [reader, writer],
        clock=clock,
        budget=Budget(deadline_seconds=100, tool_timeout_seconds=60),
    )
    s = run(rig.service.create_session())
    result = run(rig.service.send(s.id, "go"))
    assert result.run.status is RunStatus.BUDGET_EXHAUSTED
    assert writer.invocations == []
    rows = shape(rig.history(s.id))
    assert rows[3][:4] == (4, "tool_result", "c2", "cancelled")
    assert "less than the call's timeout of 60 s" in rows[3][4]
    assert run(rig.store.get_session(s.id)).active_run_id is None


def test_a_started_side_effect_settles_and_then_the_deadline_ends_the_run() -> None:
    clock = FixedClock()

    def long_write(inv: ToolInvocation) -> str:
        clock.advance(70)  # past the deadline, within its own timeout
        return "written"

    writer = RecordingTool(spec("write", EffectClass.SIDE_EFFECT), fn=long_write)
    rig = make_rig(
        [reply("", call("write", {"text": "b"}, "c1")), reply("never asked")],
        [writer],
        clock=clock,
        budget=Budget(deadline_seconds=61, tool_timeout_seconds=60),
    )
    s = run(rig.service.create_session())
    result = run(rig.service.send(s.id, "go"))
    assert result.run.status is RunStatus.BUDGET_EXHAUSTED
    assert result.run.error is not None and result.run.error.code == "deadline"
    rows = shape(rig.history(s.id))
    assert rows[2] == (3, "tool_result", "c1", "succeeded", "written")  # not unknown
    assert run(rig.store.get_session(s.id)).active_run_id is None


PRICED = ModelCapabilities(price_input_per_mtok=1_000.0, price_output_per_mtok=2_000.0)


def test_a_cost_ceiling_ends_the_run() -> None:
    # 10 in + 5 out tokens at $1000/$2000 per Mtok = $0.02 per turn
    turns = Turns([reply("", call("echo", {"text": "a"}, f"c{n}")) for n in range(5)])
    store = MemoryStore()
    from plait.application.service import AgentService
    from plait.testing import SequentialIds, echo_tool

    service = AgentService.build(
        store=store,
        artifacts=store,
        model=FunctionModel(turns, capabilities=PRICED),
        tools=[echo_tool().tool],
        clock=FixedClock(),
        ids=SequentialIds(),
        budget=Budget(max_cost_usd=0.05),
    )
    s = run(service.create_session())
    result = run(service.send(s.id, "go"))
    assert result.run.status is RunStatus.BUDGET_EXHAUSTED
    assert result.run.error is not None and result.run.error.code == "max_cost"
    assert len(turns.requests) == 3  # $0.02, $0.04, then $0.06 >= $0.05


def test_a_cost_ceiling_without_prices_is_a_clear_error() -> None:
    rig = make_rig([reply("x")], budget=Budget(max_cost_usd=1.0))
    s = run(rig.service.create_session())
    with pytest.raises(ConfigError, match="declares none"):
        run(rig.service.send(s.id, "go"))
    assert run(rig.store.read_messages(s.id)) == []


def test_recovery_opens_the_model_the_run_was_started_with() -> None:
    store, clock = MemoryStore(), FixedClock()
    first = make_rig(
        [], store=store, clock=clock, model_spec="fake:first", checkpoint=die_at("user_saved")
    )
    s = run(first.service.create_session())
    with pytest.raises(Died):
        run(first.service.send(s.id, "go"))
    (crashed,) = run(store.list_runs())
    assert (crashed.model, crashed.model_spec) == ("fn", "fake:first")
    clock.advance(61)
    opened: list[str] = []
    original = Turns([reply("answered by the original model")])

    def factory(spec_: str) -> Any:
        opened.append(spec_)
        return FunctionModel(original, name="fn")

    other = Turns([])
    second = make_rig([], store=store, clock=clock, ids=_ids(), model_factory=factory)
    second.service.caller._model = FunctionModel(other, name="another")
    (report,) = run(second.service.recover())
    assert report.outcome == "resumed" and opened == ["fake:first"]
    assert report.result is not None and report.result.run.status is RunStatus.COMPLETED
    assert other.requests == [] and len(original.requests) == 1


def test_recovery_skips_a_run_whose_model_cannot_be_reopened() -> None:
    store, clock = MemoryStore(), FixedClock()
    first = make_rig([], store=store, clock=clock, checkpoint=die_at("user_saved"))
    s = run(first.service.create_session())
    with pytest.raises(Died):
        run(first.service.send(s.id, "go"))
    clock.advance(61)

    def factory(spec_: str) -> Any:
        raise ConfigError(f"no such model {spec_}")

    second = make_rig([], store=store, clock=clock, ids=_ids(), model_factory=factory)
    second.service.caller._model = FunctionModel(Turns([]), name="another")
    (report,) = run(second.service.recover())
    assert report.outcome == "skipped"
    assert "'fn'" in report.detail and "cannot be reopened" in report.detail


# --- cancel has final priority (issue 21, item 2) --------------------------------------------


def test_a_cancel_at_the_step_cap_ends_the_run_cancelled_not_budget_exhausted() -> None:
    async def cancel_then_answer(inv: ToolInvocation) -> str:
        await rig.service.cancel(inv.run_id)  # while the call runs (it cannot be stopped)
        return "done"

    tool = RecordingTool(spec("t"), fn=cancel_then_answer, stoppable=False)
    rig = make_rig([reply("", call("t", {"text": "1"}, "c1"))], [tool], budget=Budget(max_steps=1))
    s = run(rig.service.create_session())
    result = run(rig.service.send(s.id, "go"))
    assert result.run.status is RunStatus.CANCELLED, result.run.error
    assert result.run.error is not None and result.run.error.code == "cancelled"


def test_a_cancel_is_checked_before_the_deadline() -> None:
    clock = FixedClock()

    async def cancel_past_the_deadline(inv: ToolInvocation) -> str:
        await rig.service.cancel(inv.run_id)
        clock.advance(120)  # and the deadline passes meanwhile
        return "done"

    tool = RecordingTool(spec("t"), fn=cancel_past_the_deadline, stoppable=False)
    rig = make_rig(
        [reply("", call("t", {"text": "1"}, "c1"), call("t", {"text": "2"}, "c2"))],
        [tool],
        clock=clock,
        budget=Budget(deadline_seconds=60),
    )
    s = run(rig.service.create_session())
    result = run(rig.service.send(s.id, "go"))
    assert result.run.status is RunStatus.CANCELLED, result.run.error
    rows = shape(rig.history(s.id))
    assert rows[3][2:] == ("c2", "cancelled", "not executed: the run was cancelled")


def test_a_cancel_while_a_call_goes_to_approval_ends_the_run_cancelled() -> None:
    from plait.application.gate import GateDecision, GateRequest

    class CancelThenAsk:
        async def decide(self, request: GateRequest) -> GateDecision:
            await rig.service.cancel(request.run.id)  # arrives while the gate decides
            return GateDecision.needs_approval("writes need approval", by="test")

    tool = RecordingTool(spec("w", EffectClass.SIDE_EFFECT))
    rig = make_rig([reply("", call("w", {"text": "1"}, "c1"))], [tool], gate=CancelThenAsk())
    s = run(rig.service.create_session())
    result = run(rig.service.send(s.id, "go"))
    assert result.run.status is RunStatus.CANCELLED, result.run.error
    assert tool.invocations == []
    rows = shape(rig.history(s.id))
    assert rows[2][2:] == ("c1", "cancelled", "not executed: the run was cancelled")
    assert run(rig.store.get_session(s.id)).active_run_id is None


def test_a_reviewer_call_is_checked_against_the_budget_before_it_is_made() -> None:
    from plait.application.gate import GateDecision, GateRequest
    from plait.domain.context import Context

    class Reviewing:
        async def decide(self, request: GateRequest) -> GateDecision:
            context: Context[dict[str, object]] = Context(
                instructions="review", tools=(), items=(), output_type=dict
            )
            await request.reviewer(context)
            return GateDecision.allow(by="reviewer")

    tool = RecordingTool(spec("t"))
    rig = make_rig(
        [reply("", call("t", {"text": "1"}, "c1"))],
        [tool],
        budget=Budget(max_model_calls=1),
        gate=Reviewing(),
    )
    s = run(rig.service.create_session())
    result = run(rig.service.send(s.id, "go"))
    assert result.run.status is RunStatus.BUDGET_EXHAUSTED, result.run.error
    assert result.run.error is not None and result.run.error.code == "max_model_calls"
    assert [r.role for r in rig.turns.requests] == ["assistant"]  # the reviewer was not asked
    assert tool.invocations == []
    assert result.run.usage.model_calls == 1
    rows = shape(rig.history(s.id))
    assert rows[-1][2:4] == ("c1", "cancelled")  # the call is paired, never run
