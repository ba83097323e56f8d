"""The project's own fault server (tests/mcp/fault_server.py), sandboxed, driven by a
scripted model through plait: each fault gives its documented outcome and the run goes
on; destructive calls wait for an approval bound to their exact arguments."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest

from plait.adapters.mcp import McpServerConfig, McpServerError
from plait.domain.messages import ToolResult, ToolStatus
from plait.domain.policy import Action, Policy
from plait.domain.runs import RunStatus
from plait.domain.session import Session
from plait.domain.tools import EffectClass
from plait.runtime import Runtime
from plait.testing import ScriptedModel
from tests.mcp.conftest import fault_server

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("bwrap")]

ALLOW_OTHER = Policy(other=Action.ALLOW)
"""Side effects without paths are allowed: only the destructive-tool rule asks."""


def script(*turns: list[tuple[str, dict[str, Any]]], end: str = "done") -> ScriptedModel:
    assistant: list[dict[str, Any]] = [
        {
            "tool_calls": [
                {"name": f"mcp__fault__{name}", "arguments": args, "id": f"c{i}_{j}"}
                for j, (name, args) in enumerate(turn)
            ]
        }
        for i, turn in enumerate(turns)
    ]
    return ScriptedModel({"version": 1, "assistant": [*assistant, {"text": end}]})


def server_log(ws: Path) -> list[dict[str, Any]]:
    path = ws / "mcp-calls.log"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()]


class Rig:
    def __init__(
        self,
        tmp_path: Path,
        ws: Path,
        model: ScriptedModel,
        config: McpServerConfig | None = None,
        policy: Policy = ALLOW_OTHER,
    ) -> None:
        self.ws = ws
        self.rt = Runtime.open(
            db=f"sqlite:///{tmp_path / 'plait.db'}",
            model=model,
            mcp_servers={"fault": config or fault_server()},
            policy=policy,
        )
        self.loop = asyncio.new_event_loop()
        self.loop.run_until_complete(
            self.rt.store.create_session(Session(id="s1", created_at=1.0, workspace=str(ws)))
        )

    def do(self, coro: Any) -> Any:
        return self.loop.run_until_complete(coro)

    def send(self) -> Any:
        return self.do(self.rt.service.send("s1", "go"))

    def results(self, result: Any) -> dict[str, ToolResult]:
        return {
            m.message.call_id: m.message.result
            for m in result.messages
            if m.message.kind == "tool_result"
        }

    def close(self) -> None:
        self.do(self.rt.close())
        self.loop.close()


@pytest.fixture
def ws(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "ws"
    path.mkdir()
    monkeypatch.chdir(path)
    return path


def test_results_carry_the_idempotency_key_and_failures_are_failed(
    tmp_path: Path, ws: Path
) -> None:
    model = script(
        [("peek", {})],
        [("fail", {}), ("bad_image", {})],
        [("flood", {"size": 100_000})],
    )
    rig = Rig(tmp_path, ws, model)
    try:
        result = rig.send()
        assert result.run.status is RunStatus.COMPLETED
        results = rig.results(result)
        assert results["c0_0"].status is ToolStatus.SUCCEEDED
        (record,) = [
            r for r in rig.do(rig.rt.store.get_executions(result.run.id)) if r.call_id == "c0_0"
        ]
        (logged,) = server_log(ws)
        assert logged["meta"]["dev.plait/idempotency_key"] == record.idempotency_key
        # isError is a failed result; so is a malformed one (image data that is not base64)
        assert results["c1_0"].status is ToolStatus.FAILED
        assert "this tool always fails" in results["c1_0"].content
        assert results["c1_1"].status is ToolStatus.FAILED
        assert "not base64" in results["c1_1"].content
        # the output cap applies: the model sees a view, the artifact holds everything
        flood = results["c2_0"]
        assert flood.status is ToolStatus.SUCCEEDED and flood.artifact is not None
        assert len(flood.content.encode()) <= 32_000 and flood.artifact.size >= 100_000
    finally:
        rig.close()


def test_a_server_that_crashes_mid_call_is_restarted_and_the_call_settled_by_effect(
    tmp_path: Path, ws: Path
) -> None:
    # declared read-only by the user's override: the lost call is failed, the run goes on
    config = fault_server(effects={"crash": EffectClass.READ_ONLY})
    rig = Rig(tmp_path, ws, script([("crash", {})], [("peek", {})]), config)
    try:
        result = rig.send()
        assert result.run.status is RunStatus.COMPLETED
        results = rig.results(result)
        assert results["c0_0"].status is ToolStatus.FAILED
        assert "exited during the call" in results["c0_0"].content
        assert results["c1_0"].status is ToolStatus.SUCCEEDED  # a new server process
        assert [e["event"] for e in server_log(ws)] == ["crash", "peek"]
    finally:
        rig.close()


def test_a_side_effect_lost_in_a_crash_is_unknown(tmp_path: Path, ws: Path) -> None:
    rig = Rig(tmp_path, ws, script([("crash", {})]))
    try:
        result = rig.send()
        assert result.run.status is RunStatus.AWAITING_RESOLUTION
        (record,) = rig.do(rig.rt.store.get_executions(result.run.id))
        assert record.result_status is ToolStatus.UNKNOWN
        assert "exited during the call" in (record.note or "")
    finally:
        rig.close()


def test_a_hanging_call_times_out_and_the_server_is_told_to_cancel(
    tmp_path: Path, ws: Path
) -> None:
    config = fault_server(timeout_seconds=1.0)
    rig = Rig(tmp_path, ws, script([("hang", {})], [("peek", {})]), config)
    try:
        result = rig.send()
        assert result.run.status is RunStatus.COMPLETED
        results = rig.results(result)
        assert results["c0_0"].status is ToolStatus.FAILED
        assert "did not answer within 1 s (cancellation sent)" in results["c0_0"].content
        assert results["c1_0"].status is ToolStatus.SUCCEEDED
        deadline = time.monotonic() + 30
        while "hang_cancelled" not in [e["event"] for e in server_log(ws)]:
            assert time.monotonic() < deadline, server_log(ws)
            time.sleep(0.05)
    finally:
        rig.close()


def test_a_changed_tool_list_is_offered_at_the_next_step(tmp_path: Path, ws: Path) -> None:
    model = script([("add_tool", {})], [("extra", {})])
    rig = Rig(tmp_path, ws, model)
    try:
        result = rig.send()
        assert result.run.status is RunStatus.COMPLETED
        offered = [{t.name for t in r.context.tools} for r in model.requests]
        assert "mcp__fault__extra" not in offered[0]
        assert "mcp__fault__extra" in offered[1] and "mcp__fault__extra" in offered[2]
        results = rig.results(result)
        assert results["c0_0"].content == "added"
        assert results["c1_0"].status is ToolStatus.SUCCEEDED
        assert results["c1_0"].content == "extra"
        assert rig.rt.mcp is not None and rig.rt.mcp.tools_changed() == []
    finally:
        rig.close()


def test_a_destructive_tool_that_appears_mid_run_waits_for_approval(
    tmp_path: Path, ws: Path
) -> None:
    rig = Rig(tmp_path, ws, script([("add_tool", {"destructive": True})], [("extra", {})]))
    try:
        result = rig.send()
        assert result.run.status is RunStatus.AWAITING_APPROVAL
        (record,) = [
            r
            for r in rig.do(rig.rt.store.get_executions(result.run.id))
            if r.tool_name == "mcp__fault__extra"
        ]
        assert record.decided_by == "policy:rules.mcp.destructive"
        assert "extra" not in [e["event"] for e in server_log(ws)]
    finally:
        rig.close()


def test_a_server_that_does_not_start_is_one_error_naming_it(tmp_path: Path, ws: Path) -> None:
    broken = McpServerConfig(name="broken", command="/bin/false")
    with pytest.raises(McpServerError, match="MCP server 'broken' did not start"):
        Runtime.open(
            db=f"sqlite:///{tmp_path / 'plait.db'}",
            model=script(),
            mcp_servers={"broken": broken},
        )


def test_a_destructive_call_waits_and_an_approval_binds_its_exact_arguments(
    tmp_path: Path, ws: Path
) -> None:
    model = script([("write_note", {"text": "A"})], [("write_note", {"text": "B"})])
    rig = Rig(tmp_path, ws, model)
    try:
        first = rig.send()
        assert first.run.status is RunStatus.AWAITING_APPROVAL
        assert server_log(ws) == []  # nothing reached the server
        desk = rig.rt.approval_desk()
        (pending_a,) = rig.do(desk.pending(first.run))
        decided = rig.do(
            desk.decide_and_continue(pending_a.id, approve=True, grantor="ana", ttl_seconds=600)
        )
        # A ran; B has other arguments: the approval of A does not cover it
        assert decided.run.status is RunStatus.AWAITING_APPROVAL
        assert [e.get("text") for e in server_log(ws)] == ["A"]
        (pending_b,) = rig.do(desk.pending(decided.run))
        assert pending_b.args_digest != pending_a.args_digest
        denied = rig.do(
            desk.decide_and_continue(pending_b.id, approve=False, grantor="ana", reason="not B")
        )
        assert denied.run.status is RunStatus.COMPLETED
        results = rig.results(denied.result)
        assert results["c1_0"].status is ToolStatus.DENIED
        # the denied call never reached the server
        assert [e.get("text") for e in server_log(ws)] == ["A"]
    finally:
        rig.close()


def test_cancelling_the_caller_sends_the_cancellation_to_the_server(
    tmp_path: Path, ws: Path
) -> None:
    from plait.application.ports import ToolInvocation
    from plait.domain.messages import ToolCall

    rig = Rig(tmp_path, ws, script())
    try:
        (hang,) = [t for t in rig.rt.tools if t.spec.name == "mcp__fault__hang"]
        invocation = ToolInvocation(
            call=ToolCall.create(id="c1", name=hang.spec.name, arguments={}),
            session_id="s1",
            run_id="r1",
            workspace=str(ws),
            idempotency_key="k1",
        )

        async def cancel_midway() -> None:
            task = asyncio.ensure_future(hang.execute(invocation))
            while "hang" not in [e["event"] for e in server_log(ws)]:
                assert not task.done()
                await asyncio.sleep(0.05)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task

        rig.do(cancel_midway())
        deadline = time.monotonic() + 30
        while "hang_cancelled" not in [e["event"] for e in server_log(ws)]:
            assert time.monotonic() < deadline, server_log(ws)
            time.sleep(0.05)
    finally:
        rig.close()


def test_a_server_that_never_answers_is_one_error_and_its_stderr_is_quoted(
    tmp_path: Path, ws: Path, manager_for: Any
) -> None:
    from plait.adapters.mcp import list_mcp_tools
    from tests.mcp.conftest import python_server

    mute = McpServerConfig(name="mute", command="/bin/sleep", args=("600",), startup_seconds=1.0)
    with pytest.raises(McpServerError, match="MCP server 'mute' did not answer within 1 s"):
        list_mcp_tools(manager_for(mute, workspace=ws))
    # a real server refusing its arguments: the error names it and quotes what it said
    git = python_server("git", "mcp-server-git", "--repository", ".")
    with pytest.raises(McpServerError) as info:
        list_mcp_tools(manager_for(git, workspace=ws))
    assert info.value.message.startswith("MCP server 'git' did not start")
    assert "is not a valid Git repository" in info.value.message
