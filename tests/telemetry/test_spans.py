"""The span tree of a run under the GenAI conventions: two tool calls, a retry, a denial,
a compaction and an approval (the run continued by a resume: a second segment, linked)."""

from __future__ import annotations

import asyncio
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import StatusCode

from plait.adapters.stores.memory.store import MemoryStore
from plait.application.compaction import CompactionService, ModelProfile, ModelProfiles
from plait.application.governance.gate import GovernedGate
from plait.application.governance.governor import Governor
from plait.application.governance.reviewer import Reviewer
from plait.application.model_caller import RetryPolicy
from plait.application.service import AgentService
from plait.domain.compaction import CompactionSettings
from plait.domain.policy import Action, Policy, ToolRule
from plait.domain.runs import RunStatus
from plait.domain.tools import EffectClass, ToolSpec
from plait.testing import (
    CharMeter,
    FixedClock,
    RecordingTool,
    ScriptedModel,
    SequentialIds,
    echo_tool,
)
from tests.telemetry.conftest import Otel, parent_id

WINDOW = 3_000
BIG = "x" * 2_200
EDIT = ToolSpec(
    name="edit_file",
    description="Edit a file.",
    parameters={"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
    effect=EffectClass.SIDE_EFFECT,
)
POLICY = Policy(
    rules=(
        ToolRule(
            name="no-deploy",
            action=Action.DENY,
            tools=("edit_file",),
            paths=("deploy/**",),
            reason="deploy config is off limits",
        ),
        ToolRule(name="ask-edits", action=Action.APPROVE, tools=("edit_file",)),
    )
)


def call(call_id: str, name: str, **arguments: Any) -> dict[str, Any]:
    return {"tool_calls": [{"name": name, "arguments": arguments, "id": call_id}]}


def model() -> ScriptedModel:
    caps = {"context_window": WINDOW, "max_output_tokens": 300}
    assistant = [
        call("c1", "echo", text=f"one {BIG}"),
        {"error": "transient"},
        call("c2", "echo", text=f"two {BIG}"),
        call("c3", "edit_file", path="deploy/app.yaml"),
        call("c4", "edit_file", path="tests/test_app.py"),
        {"text": "Done."},
    ]
    summary = {"structured": {"goal": "echo things"}}
    return ScriptedModel(
        {"version": 1, "capabilities": caps, "assistant": assistant, "summarizer": [summary] * 2}
    )


def service(otel: Otel, scripted: ScriptedModel) -> tuple[AgentService, MemoryStore, RecordingTool]:
    store, clock, ids = MemoryStore(), FixedClock(), SequentialIds()
    profile = ModelProfile(
        model=scripted.name, meter=CharMeter(), context_window=WINDOW, max_output_tokens=300
    )
    compaction = CompactionService(
        store=store,
        profiles=ModelProfiles([profile]),
        summarizer=scripted,
        clock=clock,
        ids=ids,
        settings=CompactionSettings(summary_max_tokens=300),
    )
    governor = Governor(
        policy=POLICY,
        approvals=store,
        clock=clock,
        ids=ids,
        reviewer=Reviewer(config=POLICY.reviewer, name=scripted.name),
    )
    editor = RecordingTool(EDIT, output="edited")
    agent = AgentService.build(
        store=store,
        artifacts=store,
        model=scripted,
        tools=[echo_tool().tool, editor.tool],
        clock=clock,
        ids=ids,
        owner="test",
        gate=GovernedGate(governor),
        compaction=compaction,
        retry=RetryPolicy(max_attempts=3, base_delay=0.0),
        telemetry=otel.telemetry,
    )
    return agent, store, editor


def attrs(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


def by_name(spans: list[ReadableSpan], prefix: str) -> list[ReadableSpan]:
    return [s for s in spans if s.name.startswith(prefix)]


def test_a_run_with_tools_retry_denial_compaction_and_approval(otel: Otel) -> None:
    scripted = model()
    agent, store, editor = service(otel, scripted)

    async def go() -> tuple[str, str]:
        session = await agent.create_session()
        first = await agent.send(session.id, "echo, then edit")
        assert first.run.status is RunStatus.AWAITING_APPROVAL
        (pending,) = await store.list_approvals()
        await store.decide_approval(
            pending.id, approve=True, grantor="ana", at=agent.clock.now(), ttl_seconds=600
        )
        second = await agent.resume(first.run.id)
        assert second.run.status is RunStatus.COMPLETED
        return session.id, first.run.id

    session_id, run_id = asyncio.run(go())
    assert len(editor.calls) == 1
    spans = otel.finished()
    agents = by_name(spans, "invoke_agent")
    assert [s.name for s in agents] == ["invoke_agent plait", "invoke_agent plait"]
    first, resumed = agents
    (root,) = by_name(spans, "plait.run")  # the run's root: ended as the run began
    assert root.parent is None and root.end_time is not None
    assert attrs(root)["plait.run.id"] == run_id
    trace_id = root.context.trace_id
    assert {s.context.trace_id for s in spans} == {trace_id}  # one trace, both segments
    stored = asyncio.run(store.get_run(run_id)).trace_context
    flags = int(root.context.trace_flags)
    assert stored == f"00-{trace_id:032x}-{root.context.span_id:016x}-{flags:02x}"
    assert {parent_id(first), parent_id(resumed)} == {root.context.span_id}
    assert not first.links
    assert first.status.status_code is StatusCode.UNSET  # waiting for a person is no error
    assert [link.context.span_id for link in resumed.links] == [root.context.span_id]
    for segment, how, status in (
        (first, "started", "awaiting_approval"),
        (resumed, "resumed", "completed"),
    ):
        attributes = attrs(segment)
        assert attributes["gen_ai.operation.name"] == "invoke_agent"
        assert attributes["gen_ai.agent.name"] == "plait"
        assert attributes["gen_ai.conversation.id"] == session_id
        assert attributes["plait.run.id"] == run_id
        assert attributes["plait.run.segment"] == how
        assert attributes["plait.run.status"] == status

    chats = by_name(spans, "chat ")
    assert all(s.parent is not None for s in chats)
    failed = [s for s in chats if s.status.status_code is StatusCode.ERROR]
    assert len(failed) == 1  # the transient error, retried
    retried = attrs(failed[0])
    assert retried["error.type"] == "transient" and retried["plait.model.attempt"] == 1
    again = [s for s in chats if attrs(s).get("plait.model.attempt") == 2]
    assert len(again) == 1 and again[0].status.status_code is StatusCode.UNSET
    ok = attrs(again[0])
    assert ok["gen_ai.operation.name"] == "chat"
    assert ok["gen_ai.request.model"] == scripted.name == chats[0].name.split(" ", 1)[1]
    assert ok["gen_ai.response.finish_reasons"] == ("tool_calls",)
    assert ok["gen_ai.usage.input_tokens"] > 0 and ok["gen_ai.usage.output_tokens"] >= 0
    assert "gen_ai.usage.cache_read.input_tokens" in ok
    last = attrs(chats[-1])
    assert last["gen_ai.response.finish_reasons"] == ("stop",)

    tools = {attrs(s)["gen_ai.tool.call.id"]: s for s in by_name(spans, "execute_tool")}
    assert sorted(tools) == ["c1", "c2", "c3", "c4"]
    assert tools["c1"].name == "execute_tool echo"
    c1 = attrs(tools["c1"])
    assert (c1["gen_ai.tool.name"], c1["plait.tool.status"], c1["plait.tool.effect"]) == (
        "echo",
        "succeeded",
        "read_only",
    )
    assert c1["plait.gate.decision"] == "allow"
    assert "gen_ai.tool.call.arguments" not in c1  # content capture is off
    denied = attrs(tools["c3"])
    assert (denied["plait.gate.decision"], denied["plait.tool.status"]) == ("deny", "denied")
    assert denied["plait.gate.reason"] == "deploy config is off limits"
    assert "plait.tool.effect" not in denied  # never executed
    # c4 waited for approval in the first segment and ran in the second
    approved = attrs(tools["c4"])
    assert (
        approved["plait.gate.decision"] == "allow" and approved["plait.tool.status"] == "succeeded"
    )
    assert tools["c4"].parent is not None and tools["c4"].parent.span_id == resumed.context.span_id
    (wait,) = by_name(spans, "await_approval")
    assert wait.name == "await_approval edit_file"
    assert attrs(wait)["plait.run.status"] == "awaiting_approval"

    compactions = by_name(spans, "compaction")
    assert compactions, "the echo outputs put the context over its threshold"
    compacted = attrs(compactions[0])
    assert compacted["plait.compaction.outcome"] == "activated"
    assert compacted["plait.compaction.tokens_saved"] > 0

    usage = otel.points("gen_ai.client.token.usage")
    assert {a["gen_ai.token.type"] for a, _ in usage} == {"input", "output"}
    durations = otel.points("gen_ai.client.operation.duration")
    assert {a.get("error.type") for a, _ in durations} == {None, "transient"}
    tool_points = {
        (a["gen_ai.tool.name"], a["plait.tool.status"])
        for a, _ in otel.points("plait.tool.duration")
    }
    assert tool_points == {
        ("echo", "succeeded"),
        ("edit_file", "denied"),
        ("edit_file", "succeeded"),
    }
    runs = {a["plait.run.status"]: v for a, v in otel.points("plait.runs")}
    assert runs == {"awaiting_approval": 1, "completed": 1}
    assert otel.points("plait.compactions") and otel.points("plait.compaction.tokens_saved")
    assert otel.points("plait.step.duration")
    scripted.assert_complete()
