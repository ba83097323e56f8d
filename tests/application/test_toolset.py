"""A ToolSet changes between steps: the next step's request offers the new tools, the
gate and the runner get them, a waiting call to a tool that is gone fails; nothing is
listed again while the source says nothing changed."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from plait.application.gate import GateDecision
from plait.application.ports import Tool, ToolInvocation, ToolOutput
from plait.application.service import AgentService
from plait.application.toolset import ToolSet
from plait.domain.messages import ToolStatus
from plait.domain.runs import RunStatus
from plait.domain.tools import EffectClass
from plait.testing import RecordingTool

from .conftest import call, make_rig, reply, run, shape, spec
from .test_gate import ScriptedGate


class Source:
    """Tools that change when :meth:`become` is called; counts the listings."""

    def __init__(self, tools: Sequence[Tool]) -> None:
        self.tools = list(tools)
        self.listed = {t.spec.name for t in tools}
        self.dirty = False
        self.reloads = 0
        self.checks = 0

    def become(self, tools: Sequence[Tool]) -> None:
        self.tools, self.dirty = list(tools), True

    def owns(self, name: str) -> bool:
        return name in self.listed

    def groups(self) -> tuple[str, ...]:
        return ("source",)

    def group_of(self, name: str) -> str | None:
        return "source" if name in self.listed else None

    def changed(self) -> bool:
        self.checks += 1
        return self.dirty

    async def reload(self) -> Sequence[Tool]:
        self.reloads += 1
        self.dirty = False
        self.listed = {t.spec.name for t in self.tools}
        return self.tools


def offered(request: Any) -> list[str]:
    return sorted(t.name for t in request.context.tools)


def test_a_tool_added_mid_run_is_offered_at_the_next_step_and_runs() -> None:
    extra = RecordingTool(spec("extra"), output="extra ran")
    source = Source([])

    async def grow(invocation: ToolInvocation) -> ToolOutput:
        source.become([extra.tool])
        return ToolOutput(content="grown")

    fixed = Tool(spec=spec("grow", EffectClass.SIDE_EFFECT), execute=grow)
    gate = ScriptedGate({})
    rig = make_rig(
        [
            reply("", call("grow", {"text": "a"}, "c1")),
            reply("", call("extra", {"text": "b"}, "c2")),
            reply("", call("grow", {"text": "c"}, "c3")),
            reply("done"),
        ],
        tools=(),
        gate=gate,
    )
    # a service over the rig's store and model, with a tool set that has a source
    service = AgentService.build(
        store=rig.store,
        artifacts=rig.store,
        model=rig.service.model,
        tools=ToolSet([fixed], source),
        clock=rig.clock,
        ids=rig.service.ids,
        owner="worker-test",
        gate=gate,
    )
    s = run(service.create_session())
    result = run(service.send(s.id, "go"))
    assert result.run.status is RunStatus.COMPLETED
    first, second, third, last = rig.turns.requests
    assert offered(first) == ["grow"]
    assert offered(second) == offered(third) == offered(last) == ["extra", "grow"]
    assert [i.call.id for i in extra.invocations] == ["c2"]
    assert [r.call.name for r in gate.requests] == ["grow", "extra", "grow"]
    assert gate.requests[1].spec.name == "extra"
    rows = shape(rig.history(s.id))
    assert rows[4][1:4] == ("tool_result", "c2", "succeeded")
    # listed again once per change; asked once per step (and once per drive) otherwise
    assert source.reloads == 2 and source.checks == 5


def test_a_waiting_call_to_a_tool_that_is_gone_fails_clearly() -> None:
    writer = RecordingTool(spec("write", EffectClass.SIDE_EFFECT))
    source = Source([writer.tool])
    gate = ScriptedGate({"write": GateDecision.needs_approval("a person must ok it", by="p")})
    rig = make_rig([reply("", call("write", {"text": "x"}, "c1")), reply("done")], gate=gate)

    service = AgentService.build(
        store=rig.store,
        artifacts=rig.store,
        model=rig.service.model,
        tools=ToolSet([writer.tool], source),
        clock=rig.clock,
        ids=rig.service.ids,
        owner="worker-test",
        gate=gate,
    )
    s = run(service.create_session())
    waiting = run(service.send(s.id, "go"))
    assert waiting.run.status is RunStatus.AWAITING_APPROVAL
    source.become([])  # the server dropped the tool meanwhile
    gate.verdicts.clear()
    resumed = run(service.resume(waiting.run.id))
    assert resumed.run.status is RunStatus.COMPLETED
    assert writer.invocations == []
    (record,) = run(rig.store.get_executions(waiting.run.id))
    assert record.result_status is ToolStatus.FAILED
    result = shape(rig.history(s.id))[2]
    assert result[1:4] == ("tool_result", "c1", "failed")
    assert "'write' is no longer available" in result[4]
    assert offered(rig.turns.requests[-1]) == []
    # the gate was not asked again about the vanished tool
    assert [r.call.name for r in gate.requests] == ["write"]


def test_without_a_change_the_tools_are_the_same_objects() -> None:
    reader = RecordingTool(spec("read"))
    toolset = ToolSet([reader.tool], Source([]))
    before = toolset.tools
    assert run(toolset.refresh()) == 0 and toolset.tools is before
