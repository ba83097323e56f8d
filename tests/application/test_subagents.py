"""Sub-agents as durable child runs: delegation, the parent link, the budget share and
charge, a crash of the parent's process while the child runs, and cancel."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from plait.adapters.shapes import approval_json
from plait.adapters.stores.memory.store import MemoryStore
from plait.application.ports import ModelCapabilities, ModelRequest, ModelResponse, RawToolCall
from plait.domain.errors import ConfigError, ValidationError
from plait.domain.messages import (
    AssistantMessage,
    ToolResultMessage,
    ToolStatus,
    Usage,
    UserMessage,
)
from plait.domain.policy_toml import parse_policy
from plait.domain.runs import Budget, RunStatus
from plait.domain.session import ForkOrigin
from plait.domain.subagents import ParentCall, SubAgent, child_ids
from plait.domain.tools import EffectClass, ToolSpec
from plait.runtime import Runtime, governed_gate
from plait.testing import FixedClock, FunctionModel, RecordingTool, SequentialIds
from tests.application.conftest import run

COUNTER = SubAgent(
    name="counter",
    instructions="You are the counter: count with the tally tool, answer the count.",
    tools=("tally",),
    max_model_calls=5,
)


class Died(BaseException):
    """Stands for the process dying."""


def tally_tool() -> RecordingTool:
    spec = ToolSpec(
        name="tally",
        description="count things (an external effect: must not run twice)",
        parameters={"type": "object", "properties": {}, "additionalProperties": False},
        effect=EffectClass.SIDE_EFFECT,
    )
    return RecordingTool(spec, output="3 things")


def _child(request: ModelRequest) -> bool:
    return request.context.instructions.startswith("You are the counter")


class Agents:
    """Parent: delegates the user's text, then quotes the delegate's result. Child: calls
    tally, then answers with the tally's output. ``hold_child_answer`` makes the child's
    answer wait (or ``die_in_child_answer`` raise Died) instead."""

    def __init__(self) -> None:
        self.requests: list[ModelRequest] = []
        self.die_in_child_answer = False
        self.hold_child_answer: asyncio.Event | None = None
        self.child_waiting = asyncio.Event()

    async def __call__(self, request: ModelRequest) -> ModelResponse:
        self.requests.append(request)
        items = request.context.items
        last = items[-1]
        if _child(request):
            if isinstance(last, UserMessage):
                return ModelResponse(tool_calls=(RawToolCall(id="t1", name="tally", arguments={}),))
            if self.die_in_child_answer:
                raise Died
            if self.hold_child_answer is not None:
                self.child_waiting.set()
                await self.hold_child_answer.wait()
            assert isinstance(last, ToolResultMessage)
            return ModelResponse(text=f"counted: {last.result.content}")
        if isinstance(last, UserMessage):
            call = RawToolCall(id="d1", name="delegate_counter", arguments={"task": last.text})
            return ModelResponse(text="asking the counter", tool_calls=(call,))
        assert isinstance(last, ToolResultMessage)
        return ModelResponse(text=f"the counter says {last.result.content}")


def runtime(
    store: MemoryStore,
    clock: FixedClock,
    agents: Agents,
    tally: RecordingTool,
    *,
    start: int = 0,
    budget: Budget | None = None,
) -> Runtime:
    return Runtime(
        store=store,
        artifacts=store,
        model=FunctionModel(agents, name="fn"),
        tools=[tally.tool],
        clock=clock,
        ids=SequentialIds(start=start),
        owner=f"worker-{start}",
        subagents=[COUNTER],
        budget=budget,
    )


def _result_of(store: MemoryStore, session_id: str, call_id: str) -> ToolResultMessage:
    (result,) = [
        s.message
        for s in run(store.read_messages(session_id))
        if isinstance(s.message, ToolResultMessage) and s.message.call_id == call_id
    ]
    return result


def test_a_parent_delegates_to_a_child_run_that_calls_a_tool() -> None:
    store, clock, agents, tally = MemoryStore(), FixedClock(), Agents(), tally_tool()
    rt = runtime(store, clock, agents, tally, budget=Budget(max_model_calls=20))
    session = run(rt.service.create_session())
    result = run(rt.service.send(session.id, "count the apples"))
    assert result.run.status is RunStatus.COMPLETED
    final = result.messages[-1].message
    assert isinstance(final, AssistantMessage)
    assert final.text == "the counter says counted: 3 things"
    (parent_call,) = [r for r in run(store.get_executions(result.run.id))]
    assert parent_call.effect is EffectClass.IDEMPOTENT
    child_session, child_run_id = child_ids(parent_call.idempotency_key)
    child = run(store.get_run(child_run_id))
    assert child.status is RunStatus.COMPLETED and child.session_id == child_session
    assert child.parent == ParentCall(
        session_id=session.id, run_id=result.run.id, call_id="d1", agent="counter"
    )
    # the child's budget: its share, capped by what the parent had left (20 - 1 call)
    assert child.budget.max_model_calls == 5
    kinds = [
        (s.message.kind, s.message.text if s.message.kind != "tool_result" else "")
        for s in run(store.read_messages(child_session))
    ]
    assert kinds == [
        ("user", "count the apples"),
        ("assistant", ""),
        ("tool_result", ""),
        ("assistant", "counted: 3 things"),
    ]
    assert len(tally.invocations) == 1
    # the child's two model calls are charged to the parent (two of its own)
    assert result.run.usage.model_calls == 4
    assert run(store.get_session(child_session)).title == f"counter for d1 of {result.run.id}"


def test_the_child_budget_is_capped_by_what_the_parent_has_left() -> None:
    store, clock, agents, tally = MemoryStore(), FixedClock(), Agents(), tally_tool()
    rt = runtime(store, clock, agents, tally, budget=Budget(max_model_calls=2))
    session = run(rt.service.create_session())
    result = run(rt.service.send(session.id, "count"))
    (record,) = run(store.get_executions(result.run.id))
    child = run(store.get_run(child_ids(record.idempotency_key)[1]))
    assert child.budget.max_model_calls == 1  # 2 - the parent's one call
    assert child.status is RunStatus.BUDGET_EXHAUSTED
    failed = _result_of(store, session.id, "d1")
    assert failed.result.status is ToolStatus.FAILED
    assert "ended budget_exhausted" in failed.result.content


def test_the_parent_dies_while_the_child_runs_and_recovery_reattaches_the_call() -> None:
    store, clock, agents, tally = MemoryStore(), FixedClock(), Agents(), tally_tool()
    agents.die_in_child_answer = True
    first = runtime(store, clock, agents, tally)
    session = run(first.service.create_session())
    with pytest.raises(Died):
        run(first.service.send(session.id, "count the pears"))
    runs = {r.id: r for r in run(store.list_runs())}
    assert {r.status for r in runs.values()} == {RunStatus.RUNNING}
    assert len(runs) == 2 and len(tally.invocations) == 1
    clock.advance(61)  # both leases expire
    agents.die_in_child_answer = False
    second = runtime(store, clock, agents, tally, start=1000)
    reports = run(second.service.recover())
    outcomes = sorted((r.outcome, r.detail) for r in reports)
    assert [o for o, _ in outcomes] == ["resumed", "skipped"]
    assert "a sub-agent's run" in outcomes[1][1]
    parent = next(r for r in reports if r.outcome == "resumed")
    assert parent.result is not None and parent.result.run.status is RunStatus.COMPLETED
    result = _result_of(store, session.id, "d1")
    assert (result.result.status, result.result.content) == (
        ToolStatus.SUCCEEDED,
        "counted: 3 things",
    )
    assert len(tally.invocations) == 1  # the child's tool did not run again
    assert len(run(store.list_runs())) == 2  # and no second child was started
    assert {r.status for r in run(store.list_runs())} == {RunStatus.COMPLETED}


def test_a_finished_child_gives_its_answer_to_the_recovered_parent() -> None:
    """The parent died after the child ended but before the call's result was saved."""
    store, clock, agents, tally = MemoryStore(), FixedClock(), Agents(), tally_tool()
    first = runtime(store, clock, agents, tally)

    def die(point: str) -> None:
        if point == "tool_returned" and any(
            r.status is RunStatus.COMPLETED for r in store._all_runs()
        ):
            raise Died

    first.service.journal._checkpoint = die
    session = run(first.service.create_session())
    with pytest.raises(Died):
        run(first.service.send(session.id, "count the plums"))
    clock.advance(61)
    second = runtime(store, clock, agents, tally, start=1000)
    asked = len(agents.requests)
    run(second.service.recover())
    result = _result_of(store, session.id, "d1")
    assert result.result.content == "counted: 3 things"
    assert len(agents.requests) == asked + 1  # only the parent's answer: no child turn
    assert len(tally.invocations) == 1


def test_a_cancel_of_the_parent_cancels_the_child() -> None:
    store, clock, agents, tally = MemoryStore(), FixedClock(), Agents(), tally_tool()
    agents.hold_child_answer = asyncio.Event()
    rt = runtime(store, clock, agents, tally)

    async def go() -> Any:
        session = await rt.service.create_session()
        sending = asyncio.create_task(rt.service.send(session.id, "count slowly"))
        await agents.child_waiting.wait()
        parent_id = next(r.id for r in await store.list_runs() if r.parent is None)
        await rt.service.cancel(parent_id)
        return await sending

    result = run(go())
    assert result.run.status is RunStatus.CANCELLED
    (child,) = [r for r in run(store.list_runs()) if r.parent is not None]
    assert child.status is RunStatus.CANCELLED


TALLY_NEEDS_APPROVAL = """
version = 1
[defaults]
read = "allow"
write = "allow"
command = "allow"
other = "allow"

[[rules]]
name = "tally"
tools = ["tally"]
action = "approve"
reason = "tallies are checked"
"""


def test_a_childs_approval_reaches_the_parents_inbox_and_both_go_on_once_approved() -> None:
    store, clock, agents, tally = MemoryStore(), FixedClock(), Agents(), tally_tool()
    model = FunctionModel(agents, name="fn")
    ids = SequentialIds()
    policy = parse_policy(TALLY_NEEDS_APPROVAL, "policy.toml")
    rt = Runtime(
        store=store,
        artifacts=store,
        model=model,
        tools=[tally.tool],
        clock=clock,
        ids=ids,
        owner="worker-0",
        subagents=[COUNTER],
        gate=governed_gate(policy, store, clock, ids, model),
    )
    session = run(rt.service.create_session())
    waiting = run(rt.service.send(session.id, "count the cherries"))
    assert waiting.run.status is RunStatus.AWAITING_APPROVAL
    assert waiting.run.error is not None and "counter agent's run" in waiting.run.error.message
    (child,) = [r for r in run(store.list_runs()) if r.parent is not None]
    assert child.status is RunStatus.AWAITING_APPROVAL and tally.invocations == []
    # the parent's session lists the child's request, with the parent named
    (request,) = run(rt.queries.list_approvals(session_id=session.id))
    assert (request.run_id, request.tool_name) == (child.id, "tally")
    parents = run(rt.queries.parents([request]))
    shown = approval_json(request, clock.now(), parents.get(request.run_id))
    assert shown["parent"] == {
        "session_id": session.id,
        "run_id": waiting.run.id,
        "call_id": "d1",
        "agent": "counter",
    }
    desk = rt.approval_desk()
    decided = run(desk.decide_and_continue(request.id, approve=True, grantor="al", ttl_seconds=60))
    assert decided.run.status is RunStatus.COMPLETED  # the child
    parent = run(store.get_run(waiting.run.id))
    assert parent.status is RunStatus.COMPLETED
    assert _result_of(store, session.id, "d1").result.content == "counted: 3 things"
    assert len(tally.invocations) == 1
    assert len(run(store.list_runs())) == 2


def test_a_fork_context_child_starts_from_the_parents_last_complete_point() -> None:
    store, clock, agents, tally = MemoryStore(), FixedClock(), Agents(), tally_tool()
    forking = replace(COUNTER, context="fork")
    rt = Runtime(
        store=store,
        artifacts=store,
        model=FunctionModel(agents, name="fn"),
        tools=[tally.tool],
        clock=clock,
        ids=SequentialIds(),
        owner="worker-0",
        subagents=[forking],
    )
    session = run(rt.service.create_session())
    result = run(rt.service.send(session.id, "count the figs"))
    assert result.run.status is RunStatus.COMPLETED
    (child,) = [r for r in run(store.list_runs()) if r.parent is not None]
    branch = run(store.get_session(child.session_id))
    user_id = result.messages[0].message.id
    assert branch.fork_origin == ForkOrigin(
        parent_session_id=session.id, fork_point_message_id=user_id
    )
    first_child_request = next(r for r in agents.requests if _child(r))
    items = list(first_child_request.context.items)
    assert [(m.kind, m.id) for m in items][:1] == [("user", user_id)]
    assert len(items) == 2  # the parent's message, then the task
    assert _result_of(store, session.id, "d1").result.content == "counted: 3 things"


def test_a_sub_agent_naming_a_tool_the_agent_lacks_is_refused() -> None:
    store = MemoryStore()
    with pytest.raises(ConfigError, match="names tools the agent does not have: grep"):
        Runtime(
            store=store,
            artifacts=store,
            model=FunctionModel(Agents(), name="fn"),
            tools=[tally_tool().tool],
            clock=FixedClock(),
            ids=SequentialIds(),
            subagents=[replace(COUNTER, tools=("tally", "grep"))],
        )


def test_a_child_longer_than_the_tool_timeout_is_bounded_by_the_run_deadline_only() -> None:
    """The delegate call is not cut by tool_timeout_seconds: the child keeps to its own
    budget (here it answers after the tool timeout would have passed)."""
    store, clock, slow, tally = MemoryStore(), FixedClock(), Agents(), tally_tool()

    async def later(request: ModelRequest) -> ModelResponse:
        if _child(request) and isinstance(request.context.items[-1], ToolResultMessage):
            await asyncio.sleep(0.05)  # longer than the parent's 0.01 s tool timeout
        return await slow(request)

    rt = Runtime(
        store=store,
        artifacts=store,
        model=FunctionModel(later, name="fn"),
        tools=[tally.tool],
        clock=clock,
        ids=SequentialIds(),
        owner="worker-0",
        subagents=[COUNTER],
        budget=Budget(tool_timeout_seconds=0.01),
    )
    session = run(rt.service.create_session())
    result = run(rt.service.send(session.id, "count the dates"))
    assert result.run.status is RunStatus.COMPLETED
    assert _result_of(store, session.id, "d1").result.content == "counted: 3 things"


def test_cancelling_a_parent_that_waits_for_its_childs_approval_cancels_both() -> None:
    store, clock, agents, tally = MemoryStore(), FixedClock(), Agents(), tally_tool()
    model = FunctionModel(agents, name="fn")
    ids = SequentialIds()
    policy = parse_policy(TALLY_NEEDS_APPROVAL, "policy.toml")
    rt = Runtime(
        store=store,
        artifacts=store,
        model=model,
        tools=[tally.tool],
        clock=clock,
        ids=ids,
        owner="worker-0",
        subagents=[COUNTER],
        gate=governed_gate(policy, store, clock, ids, model),
    )
    session = run(rt.service.create_session())
    waiting = run(rt.service.send(session.id, "count the limes"))
    assert waiting.run.status is RunStatus.AWAITING_APPROVAL
    cancelled = run(rt.service.cancel(waiting.run.id))
    assert cancelled.status is RunStatus.CANCELLED
    assert {r.status for r in run(store.list_runs())} == {RunStatus.CANCELLED}
    assert tally.invocations == []


def test_the_childs_cost_ceiling_is_what_the_parent_has_left() -> None:
    store, clock, agents, tally = MemoryStore(), FixedClock(), Agents(), tally_tool()

    async def priced(request: ModelRequest) -> ModelResponse:
        response = await agents(request)
        return replace(response, usage=Usage(input_tokens=100_000, output_tokens=0))

    prices = ModelCapabilities(
        price_input_per_mtok=2.0,
        price_output_per_mtok=8.0,
        context_window=128_000,
        structured_output=True,
    )
    rt = Runtime(
        store=store,
        artifacts=store,
        model=FunctionModel(priced, name="fn", capabilities=prices),
        tools=[tally.tool],
        clock=clock,
        ids=SequentialIds(),
        owner="worker-0",
        subagents=[COUNTER],
        budget=Budget(max_cost_usd=1.0),
    )
    session = run(rt.service.create_session())
    result = run(rt.service.send(session.id, "count the kiwis"))
    assert result.run.status is RunStatus.COMPLETED
    (child,) = [r for r in run(store.list_runs()) if r.parent is not None]
    assert child.budget.max_cost_usd == pytest.approx(0.8)  # $1 less the parent's $0.20
    # the parent was charged the child's 200k input tokens: 4 calls of 100k in all
    assert result.run.usage.input_tokens == 400_000


def test_a_sub_agent_with_its_own_policy_is_governed_by_it(tmp_path: Path) -> None:
    """The parent allows every call (no policy); the counter's own policy denies the
    tally: the child's call is denied by its rule and the tool never runs."""
    policy = tmp_path / "counter.toml"
    policy.write_text(
        'version = 1\n[[rules]]\nname = "no-tally"\ntools = ["tally"]\naction = "deny"\n'
        'reason = "the counter may not tally"\n',
        encoding="utf-8",
    )
    store, clock, agents, tally = MemoryStore(), FixedClock(), Agents(), tally_tool()
    rt = Runtime(
        store=store,
        artifacts=store,
        model=FunctionModel(agents, name="fn"),
        tools=[tally.tool],
        clock=clock,
        ids=SequentialIds(),
        owner="worker",
        subagents=[replace(COUNTER, policy=str(policy))],
        budget=Budget(max_model_calls=20),
    )
    session = run(rt.service.create_session())
    result = run(rt.service.send(session.id, "count the apples"))
    assert result.run.status is RunStatus.COMPLETED
    assert tally.invocations == []
    (parent_call,) = run(store.get_executions(result.run.id))
    child_session, _ = child_ids(parent_call.idempotency_key)
    denied = _result_of(store, child_session, "t1")
    assert denied.result.status is ToolStatus.DENIED
    assert "the counter may not tally" in (denied.result.reason or "")


def test_a_sub_agent_policy_in_plait_toml_is_a_path() -> None:
    agent = SubAgent.from_mapping("c", {"instructions": "x", "policy": "counter.toml"})
    assert agent.policy == "counter.toml"
    with pytest.raises(ValidationError, match="policy has the wrong type"):
        SubAgent.from_mapping("c", {"instructions": "x", "policy": 3})
