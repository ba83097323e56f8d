"""A sandboxed stdio MCP server cannot make or change plait's own configuration in the
workspace (``plait.toml``, ``plait-policy.toml``), as ``run_command`` cannot: the next
``plait`` run on the host reads it (MCP server commands, the sandbox's settings, the
policy). The policy's ``protect_config = false`` lifts it (the control)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.mcp.conftest import node_server
from tests.mcp.test_git_guard import fs_call

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("bwrap")]

PLANT = '[mcp.servers.evil]\ncommand = "sh"\n'


def _refused(text: str) -> bool:
    """The server's write failed on the read-only bind: written in place, the file system
    is read-only; renamed over it (the filesystem server's atomic write), it is busy."""
    return "read-only file system" in text.lower() or "EBUSY" in text


@pytest.mark.parametrize("protect_config", [True, False])
def test_a_filesystem_server_cannot_change_plait_toml(
    git_ws: Path, manager_for: Any, protect_config: bool
) -> None:
    (git_ws / "plait.toml").write_text('model = "openai:gpt-4o"\n')
    server = node_server("filesystem", "server-filesystem", ".")
    manager = manager_for(server, workspace=git_ws, protect_config=protect_config)
    failed, text = fs_call(manager, "write_file", path=str(git_ws / "plait.toml"), content=PLANT)
    if protect_config:
        assert failed and _refused(text), text
        assert (git_ws / "plait.toml").read_text() == 'model = "openai:gpt-4o"\n'
    else:
        assert not failed, text
        assert (git_ws / "plait.toml").read_text() == PLANT


def test_a_configuration_file_a_call_makes_is_removed(git_ws: Path, manager_for: Any) -> None:
    server = node_server("filesystem", "server-filesystem", ".")
    manager = manager_for(server, workspace=git_ws)
    target = git_ws / "plait-policy.toml"
    failed, text = fs_call(manager, "write_file", path=str(target), content="version = 1\n")
    assert failed and "REFUSED: the call made 'plait-policy.toml'" in text, text
    assert not target.exists()
    failed, text = fs_call(manager, "write_file", path=str(git_ws / "notes.md"), content="x")
    assert not failed, text  # an ordinary file is written


def test_one_made_on_the_host_after_the_server_started_is_read_only_to_it(
    git_ws: Path, manager_for: Any
) -> None:
    server = node_server("filesystem", "server-filesystem", ".")
    manager = manager_for(server, workspace=git_ws)
    failed, text = fs_call(manager, "list_directory", path=str(git_ws))
    assert not failed, text
    (git_ws / "plait.toml").write_text('model = "openai:gpt-4o"\n')  # `plait init` meanwhile
    failed, text = fs_call(manager, "write_file", path=str(git_ws / "plait.toml"), content=PLANT)
    assert failed and _refused(text), text
    assert (git_ws / "plait.toml").read_text() == 'model = "openai:gpt-4o"\n'
