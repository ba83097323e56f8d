"""What a branch does not inherit: runs, execution records, the right to re-execute copied
calls, and a rolled-back workspace."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from plait.adapters.tools import workspace_tools
from plait.application.ports import Commit, ForkableStore, ModelRequest, ModelResponse, RawToolCall
from plait.application.service import AgentService
from plait.domain.messages import ToolResultMessage, ToolStatus
from plait.domain.runs import Budget, Lease, Run, RunStatus
from plait.testing import FixedClock, FunctionModel, RecordingTool, SequentialIds, echo_tool
from tests.fork.conftest import forks_over, run, seed, stored


def _service(
    store: ForkableStore, model: FunctionModel, tools: list[RecordingTool]
) -> AgentService:
    return AgentService.build(
        store=store,
        artifacts=store,  # type: ignore[arg-type]
        model=model,
        tools=[t.tool for t in tools],
        clock=FixedClock(),
        ids=SequentialIds(prefix_tag="b"),
    )


@pytest.mark.slow
def test_active_run_of_the_source_is_not_inherited(store: ForkableStore) -> None:
    async def go() -> None:
        history = await seed(store)
        running = Run(
            id="r_src",
            session_id="S",
            status=RunStatus.RUNNING,
            started_at=1.0,
            budget=Budget(),
            lease=Lease(owner="elsewhere", expires_at=9e12),
        )
        await store.start_run(Commit(session_id="S", expected_version=6, run=running))
        assert (await store.get_session("S")).active_run_id == "r_src"
        result = await forks_over(store).fork_session("S", "m6", "req-1")
        branch = await store.get_session(result.branch.id)
        assert branch.active_run_id is None
        assert await store.list_runs(session_id=branch.id) == []
        model = FunctionModel(lambda r: ModelResponse(text="answered in the branch"))
        sent = await _service(store, model, []).send(branch.id, "go on here")
        assert sent.run.status is RunStatus.COMPLETED
        assert [r.id for r in await store.list_runs(session_id=branch.id)] == [sent.run.id]
        assert (await store.get_session("S")).active_run_id == "r_src"  # untouched
        assert await store.read_messages("S") == stored(history)
        assert len(model.requests[0].context.items) == 7  # m1..m6 + the new message

    run(go())


def test_copied_tool_calls_are_never_re_executed(store: ForkableStore) -> None:
    async def go() -> None:
        history = await seed(store)
        result = await forks_over(store).fork_session("S", "m5", "req-1")
        bid = result.branch.id
        read = RecordingTool(echo_tool("read_file").spec, output="fresh read")
        tests_tool = RecordingTool(echo_tool("run_tests").spec, output="fresh run")
        answers = iter(
            [
                ModelResponse(
                    tool_calls=(
                        RawToolCall(id="c9", name="read_file", arguments={"text": "again"}),
                    )
                ),
                ModelResponse(text="done"),
            ]
        )
        model = FunctionModel(lambda r: next(answers))
        service = _service(store, model, [read, tests_tool])
        assert await service.recover() == []  # the branch has nothing to recover
        sent = await service.send(bid, "look again")
        assert sent.run.status is RunStatus.COMPLETED
        assert [c.id for c in read.calls] == ["c9"]  # only the new call ran
        assert tests_tool.calls == []
        executions = await store.get_executions(sent.run.id)
        assert [e.call_id for e in executions] == ["c9"]
        branch_history = await store.read_messages(bid)
        assert branch_history[:5] == stored(history[:5])
        new = [sm.message for sm in branch_history[5:]]
        assert [m.kind for m in new] == ["user", "assistant", "tool_result", "assistant"]
        assert isinstance(new[2], ToolResultMessage) and new[2].result.content == "fresh read"
        assert await store.read_messages("S") == stored(history)

    run(go())


@pytest.mark.slow
def test_branch_reads_its_workspace_as_it_is_now(store: ForkableStore, tmp_path: Path) -> None:
    """The source later changed a file in the shared workspace; the branch's history stops
    before that, but its workspace is not rolled back, and its next tool call sees the file
    as it is now."""

    async def go() -> None:
        ws = tmp_path / "ws"
        ws.mkdir()
        (ws / "package.json").write_text('{"name": "demo"}')
        await seed(store, workspace=str(ws))
        (ws / "package.json").write_text('{"name": "demo", "upgraded": true}')  # after m6
        result = await forks_over(store).fork_session("S", "m3", "req-1")
        assert result.branch.workspace == str(ws)
        assert result.record.snapshot is None
        answers = iter(
            [
                ModelResponse(
                    tool_calls=(
                        RawToolCall(
                            id="c9",
                            name="read_file",
                            arguments=json.dumps({"path": "package.json"}),
                        ),
                    )
                ),
                ModelResponse(text="done"),
            ]
        )

        def answer(request: ModelRequest) -> ModelResponse:
            return next(answers)

        service = AgentService.build(
            store=store,
            artifacts=store,  # type: ignore[arg-type]
            model=FunctionModel(answer),
            tools=workspace_tools(),
            clock=FixedClock(),
            ids=SequentialIds(prefix_tag="b"),
        )
        sent = await service.send(result.branch.id, "read it again")
        seen = [sm.message for sm in sent.messages if isinstance(sm.message, ToolResultMessage)]
        assert seen[0].result.status is ToolStatus.SUCCEEDED
        assert "upgraded" in seen[0].result.content
        assert (ws / "package.json").read_text() == '{"name": "demo", "upgraded": true}'

    run(go())
