"""A sandboxed stdio MCP server sees the workspace's git places read-only, as
``run_command`` does: a repository's config and hooks run code when the user's own git
works there later, on the host. The policy's ``protect_git = false`` lifts it (the
control showing the probe plants a hook the host's git then runs)."""

from __future__ import annotations

import asyncio
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from plait.adapters.mcp import McpManager
from plait.domain.messages import ToolStatus
from plait.domain.policy import Action, Policy
from plait.domain.session import Session
from plait.runtime import Runtime
from plait.testing import ScriptedModel
from tests.mcp.conftest import node_server, python_server

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("bwrap")]


def nested_repo(ws: Path) -> Path:
    sub = ws / "sub"
    sub.mkdir()
    subprocess.run(["git", "init", "-q", str(sub)], check=True)
    return sub


def fs_call(manager: McpManager, tool: str, **args: Any) -> tuple[bool, str]:
    result = manager.run_sync(
        manager.call_tool("filesystem", tool, args, workspace=None, meta={}, time_limit=None)
    )
    text = "\n".join(getattr(block, "text", "") for block in result.content)
    return bool(result.is_error), text


def plant(manager: McpManager, sub: Path, marker: Path) -> list[tuple[bool, str]]:
    """The filesystem server writes a hook and a config that makes ``git status`` run it."""
    hook = sub / ".git" / "hooks" / "fsmonitor"
    script = f"#!/bin/sh\necho ran > {marker}\n"
    config = f"[core]\n\trepositoryformatversion = 0\n\tfsmonitor = {hook}\n"
    return [
        fs_call(manager, "write_file", path=str(hook), content=script),
        fs_call(manager, "write_file", path=str(sub / ".git" / "config"), content=config),
    ]


def host_git_status(sub: Path) -> None:
    hook = sub / ".git" / "hooks" / "fsmonitor"
    if hook.exists():
        hook.chmod(0o755)  # what an attacker's later step would do; the write is the gate
    subprocess.run(["git", "status"], cwd=sub, capture_output=True, check=False)


@pytest.mark.parametrize("protect_git", [True, False])
def test_a_filesystem_server_cannot_plant_a_hook_in_a_nested_repository(
    tmp_path: Path, git_ws: Path, manager_for: Any, protect_git: bool
) -> None:
    sub = nested_repo(git_ws)
    marker = tmp_path / "hook-ran"
    config_before = (sub / ".git" / "config").read_text()
    server = node_server("filesystem", "server-filesystem", ".")
    manager = manager_for(server, workspace=git_ws, protect_git=protect_git)
    said = plant(manager, sub, marker)
    host_git_status(sub)
    if protect_git:
        for failed, text in said:
            assert failed and "read-only file system" in text.lower(), text
        assert not (sub / ".git" / "hooks" / "fsmonitor").exists()
        assert (sub / ".git" / "config").read_text() == config_before
        assert not marker.exists()
    else:
        # the control: the same writes land and the host's git runs the planted hook
        assert [failed for failed, _ in said] == [False, False], said
        assert marker.read_text() == "ran\n"
    # the workspace itself stays writable
    assert fs_call(manager, "write_file", path=str(git_ws / "ok.txt"), content="ok")[0] is False
    assert (git_ws / "ok.txt").read_text() == "ok"


def test_a_repository_the_server_makes_is_undone_and_reported(
    git_ws: Path, manager_for: Any
) -> None:
    manager = manager_for(node_server("filesystem", "server-filesystem", "."), workspace=git_ws)
    new = git_ws / "new"
    failed, text = fs_call(manager, "create_directory", path=str(new / ".git" / "hooks"))
    assert failed and "REFUSED: the MCP server made git repositories ('new/.git')" in text
    assert not (new / ".git").exists() and new.is_dir()


def test_git_places_made_after_the_server_started_are_protected_too(
    tmp_path: Path, git_ws: Path, manager_for: Any
) -> None:
    manager = manager_for(node_server("filesystem", "server-filesystem", "."), workspace=git_ws)
    assert fs_call(manager, "list_directory", path=str(git_ws))[0] is False
    sub = nested_repo(git_ws)  # by the user, while the server runs
    said = plant(manager, sub, tmp_path / "hook-ran")
    assert all(failed for failed, _ in said), said
    assert not (sub / ".git" / "hooks" / "fsmonitor").exists()


def test_git_writing_tools_fail_with_a_note_naming_protect_git(
    tmp_path: Path, git_ws: Path
) -> None:
    (git_ws / "new.txt").write_text("new\n")
    model = ScriptedModel(
        {
            "version": 1,
            "assistant": [
                {
                    "tool_calls": [
                        {
                            "name": "mcp__git__git_add",
                            "arguments": {"repo_path": ".", "files": ["new.txt"]},
                            "id": "c1",
                        }
                    ]
                },
                {"text": "done"},
            ],
        }
    )
    rt = Runtime.open(
        db=f"sqlite:///{tmp_path / 'plait.db'}",
        model=model,
        mcp_servers={"git": python_server("git", "mcp-server-git", "--repository", ".")},
        policy=Policy(other=Action.ALLOW),
    )

    async def go() -> Any:
        try:
            await rt.store.create_session(Session(id="s1", created_at=1.0, workspace=str(git_ws)))
            result = await rt.service.send("s1", "add it")
            (message,) = [m.message for m in result.messages if m.message.kind == "tool_result"]
            return message.result
        finally:
            await rt.close()

    result = asyncio.run(go())
    assert result.status is ToolStatus.FAILED
    assert "protect_git = false" in result.content, result.content
    staged = subprocess.run(
        ["git", "diff", "--cached", "--name-only"], cwd=git_ws, capture_output=True, text=True
    )
    assert staged.stdout == ""
    assert os.path.exists(git_ws / ".git" / "index")
