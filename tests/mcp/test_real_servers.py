"""Real MCP servers nobody here wrote (mcp-server-git, mcp-server-time, the reference
filesystem and everything servers), sandboxed, called by a scripted model through plait
end to end: namespaced tools under the gate, execution records, results mapped fully."""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

from plait.adapters.mcp import McpServerConfig, list_mcp_tools
from plait.application.arguments import argument_errors
from plait.domain.messages import ToolResultMessage, ToolStatus
from plait.domain.policy import Action, Policy, ToolRule
from plait.domain.runs import RunStatus
from plait.domain.session import Session
from plait.domain.tools import EffectClass
from plait.runtime import Runtime
from plait.testing import ScriptedModel
from tests.mcp.conftest import node_server, python_server

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("bwrap")]


def calls(*batches: list[tuple[str, dict[str, Any]]]) -> ScriptedModel:
    turns: list[dict[str, Any]] = [
        {
            "tool_calls": [
                {"name": name, "arguments": args, "id": f"c{i}_{j}"}
                for j, (name, args) in enumerate(batch)
            ]
        }
        for i, batch in enumerate(batches)
    ]
    return ScriptedModel({"version": 1, "assistant": [*turns, {"text": "done"}]})


def run_session(
    tmp_path: Path,
    ws: Path,
    model: ScriptedModel,
    servers: list[McpServerConfig],
    policy: Policy | None = None,
) -> tuple[Any, dict[str, ToolResultMessage], list[Any], Runtime]:
    rt = Runtime.open(
        db=f"sqlite:///{tmp_path / 'plait.db'}",
        model=model,
        mcp_servers={s.name: s for s in servers},
        policy=policy,
    )

    async def go() -> tuple[Any, list[Any]]:
        await rt.store.create_session(Session(id="s1", created_at=1.0, workspace=str(ws)))
        result = await rt.service.send("s1", "use the tools")
        return result, await rt.store.get_executions(result.run.id)

    try:
        result, records = asyncio.run(go())
    except BaseException:
        asyncio.run(rt.close())
        raise
    results = {
        m.message.call_id: m.message for m in result.messages if m.message.kind == "tool_result"
    }
    return result, results, records, rt


def test_git_time_and_filesystem_tools_run_sandboxed_under_the_gate(
    tmp_path: Path, git_ws: Path
) -> None:
    (git_ws / "new.txt").write_text("untracked\n")
    model = calls(
        [
            ("mcp__time__get_current_time", {"timezone": "UTC"}),
            ("mcp__git__git_status", {"repo_path": "."}),
            ("mcp__filesystem__list_directory", {"path": str(git_ws)}),
        ]
    )
    servers = [
        python_server("time", "mcp-server-time"),
        python_server("git", "mcp-server-git", "--repository", "."),
        node_server("filesystem", "server-filesystem", "."),
    ]
    result, results, records, rt = run_session(tmp_path, git_ws, model, servers)
    try:
        assert result.run.status is RunStatus.COMPLETED
        model.assert_complete()
        now, status, listing = (results[f"c0_{j}"].result for j in range(3))
        assert now.status is ToolStatus.SUCCEEDED and '"timezone": "UTC"' in now.content
        assert status.status is ToolStatus.SUCCEEDED
        assert "new.txt" in status.content and "main" in status.content
        assert listing.status is ToolStatus.SUCCEEDED
        assert "[FILE] README.md" in listing.content and "[FILE] new.txt" in listing.content
        # every call has its execution record, decided by the policy as read-only
        read = (EffectClass.READ_ONLY, "allow", "policy:defaults.read")
        assert sorted((r.tool_name, r.effect, r.decision, r.decided_by) for r in records) == [
            ("mcp__filesystem__list_directory", *read),
            ("mcp__git__git_status", *read),
            ("mcp__time__get_current_time", *read),
        ]
    finally:
        asyncio.run(rt.close())


def test_a_destructive_filesystem_write_waits_for_approval(tmp_path: Path, git_ws: Path) -> None:
    target = str(git_ws / "out.txt")
    model = calls([("mcp__filesystem__write_file", {"path": target, "content": "x"})])
    servers = [node_server("filesystem", "server-filesystem", ".")]
    result, _results, records, rt = run_session(tmp_path, git_ws, model, servers)
    try:
        assert result.run.status is RunStatus.AWAITING_APPROVAL
        (record,) = records
        assert (record.decision, record.decided_by) == (
            "needs_approval",
            "policy:rules.mcp.destructive",
        )
        assert not (git_ws / "out.txt").exists()
    finally:
        asyncio.run(rt.close())


def test_the_everything_server_content_kinds_map_fully(tmp_path: Path, git_ws: Path) -> None:
    model = calls(
        [
            ("mcp__everything__echo", {"message": "héllo"}),
            ("mcp__everything__get-tiny-image", {}),
            ("mcp__everything__get-structured-content", {"location": "Chicago"}),
            ("mcp__everything__get-resource-reference", {"resourceType": "Text", "resourceId": 2}),
            ("mcp__everything__get-resource-reference", {"resourceType": "Blob", "resourceId": 3}),
            ("mcp__everything__get-resource-links", {"count": 2}),
            ("mcp__everything__get-annotated-message", {"messageType": "error"}),
        ]
    )
    servers = [node_server("everything", "server-everything", "stdio")]
    result, results, _records, rt = run_session(tmp_path, git_ws, model, servers)
    try:
        assert result.run.status is RunStatus.COMPLETED
        echo, image, structured, text_res, blob_res, links, annotated = (
            results[f"c0_{j}"].result for j in range(7)
        )
        assert echo.status is ToolStatus.SUCCEEDED and "héllo" in echo.content
        assert "[image: image/png," in image.content
        artifact_id = image.content.split("artifact ")[1].split("]")[0]
        ref, data = asyncio.run(rt.artifacts.get_artifact(artifact_id))
        assert ref.media_type == "image/png" and data.startswith(b"\x89PNG")
        assert structured.status is ToolStatus.SUCCEEDED
        assert '"temperature"' in structured.content
        assert "[resource demo://resource/dynamic/text/2 (text/plain)]" in text_res.content
        assert "[resource demo://resource/dynamic/blob/3 (" in blob_res.content
        assert "artifact " in blob_res.content
        assert links.content.count("[resource link ") == 2
        assert annotated.status is ToolStatus.SUCCEEDED
    finally:
        asyncio.run(rt.close())


def test_everything_schemas_and_annotations_become_specs(tmp_path: Path, git_ws: Path) -> None:
    from plait.adapters.mcp import McpManager

    manager = McpManager(
        {"everything": node_server("everything", "server-everything", "stdio")},
        workspace=str(git_ws),
        environ=os.environ,
    )
    try:
        infos = {i.remote_name: i for i in list_mcp_tools(manager)}
    finally:
        manager.close()
    assert infos["echo"].spec.effect is EffectClass.READ_ONLY
    assert infos["gzip-file-as-resource"].spec.effect is EffectClass.IDEMPOTENT
    assert infos["toggle-simulated-logging"].spec.effect is EffectClass.SIDE_EFFECT
    assert not any(i.destructive for i in infos.values())
    sums = infos["get-sum"].spec
    assert sums.name == "mcp__everything__get-sum"
    assert argument_errors(sums, {"a": 1, "b": 2}) == []
    assert argument_errors(sums, {"a": "one"}) != []
    enum = infos["get-structured-content"].spec
    assert argument_errors(enum, {"location": "Paris"}) != []


def test_progress_is_received_and_a_timeout_is_reported(tmp_path: Path, git_ws: Path) -> None:
    from plait.adapters.mcp import McpManager

    seen: list[tuple[str, str, float, float | None]] = []
    config = node_server("everything", "server-everything", "stdio", timeout_seconds=3.0)
    manager = McpManager(
        {"everything": config},
        workspace=str(git_ws),
        environ=os.environ,
        on_progress=lambda server, tool, done, total, _msg: seen.append(
            (server, tool, done, total)
        ),
    )
    try:
        result = manager.run_sync(
            manager.call_tool(
                "everything",
                "trigger-long-running-operation",
                {"duration": 1, "steps": 2},
                workspace=None,
                meta={},
                time_limit=None,
            )
        )
        assert not result.is_error
        deadline = time.monotonic() + 30  # progress callbacks run in their own tasks
        while len(seen) < 2:
            assert time.monotonic() < deadline, seen
            time.sleep(0.05)
        assert sorted(s[2:] for s in seen) == [(1, 2), (2, 2)]
        assert {s[:2] for s in seen} == {("everything", "trigger-long-running-operation")}
        from plait.adapters.mcp import McpCallLost

        with pytest.raises(McpCallLost, match="did not answer within 3 s"):
            manager.run_sync(
                manager.call_tool(
                    "everything",
                    "trigger-long-running-operation",
                    {"duration": 60, "steps": 2},
                    workspace=None,
                    meta={},
                    time_limit=None,
                )
            )
        # the server is still usable after the cancelled call
        again = manager.run_sync(
            manager.call_tool(
                "everything",
                "echo",
                {"message": "still here"},
                workspace=None,
                meta={},
                time_limit=None,
            )
        )
        assert "still here" in json.dumps(again.model_dump(mode="json"))
    finally:
        manager.close()


def test_a_policy_rule_naming_the_tool_overrides_the_destructive_hint(
    tmp_path: Path, git_ws: Path
) -> None:
    target = str(git_ws / "out.txt")
    model = calls([("mcp__filesystem__write_file", {"path": target, "content": "x"})])
    servers = [node_server("filesystem", "server-filesystem", ".")]
    trust = Policy(rules=(ToolRule(name="fs", action=Action.ALLOW, tools=("mcp__filesystem__*",)),))
    result, results, records, rt = run_session(tmp_path, git_ws, model, servers, trust)
    try:
        assert result.run.status is RunStatus.COMPLETED
        assert results["c0_0"].result.status is ToolStatus.SUCCEEDED
        assert (git_ws / "out.txt").read_text() == "x"
        assert records[0].decided_by == "policy:rules.fs"
    finally:
        asyncio.run(rt.close())
