"""A stdio MCP server runs in run_command's sandbox: it cannot read plait's store, reach
the network (unless its config allows it) or write outside the workspace. Each check has
a control showing the same probe succeeds where it is allowed."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from plait.adapters.mcp import McpManager
from plait.runtime import Runtime
from plait.testing import ScriptedModel
from tests.mcp.conftest import fault_server

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("bwrap")]


def call(manager: McpManager, tool: str, **args: Any) -> str:
    result = manager.run_sync(
        manager.call_tool("fault", tool, args, workspace=None, meta={}, time_limit=None)
    )
    (block,) = result.content
    text = getattr(block, "text", "")
    assert isinstance(text, str)
    return text


@pytest.fixture
def listener() -> Iterator[int]:
    """A loopback TCP server (its port): reachable from the host, not from a sandbox."""
    server = socket.create_server(("127.0.0.1", 0))
    server.listen()
    try:
        yield server.getsockname()[1]
    finally:
        server.close()


def test_the_store_is_never_visible(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ws, data = tmp_path / "ws", tmp_path / "data"
    ws.mkdir()
    data.mkdir()
    (data / "visible.txt").write_text("plain file\n")
    monkeypatch.chdir(ws)
    # the store's directory is bound into the sandbox: only the store itself is hidden
    rt = Runtime.open(
        db=f"sqlite:///{data / 'plait.db'}",
        model=ScriptedModel({"version": 1, "assistant": []}),
        mcp_servers={"fault": fault_server(ro_binds=(str(data),))},
    )
    try:
        assert rt.mcp is not None
        assert (data / "plait.db").stat().st_size > 0
        assert call(rt.mcp, "read_path", path=str(data / "visible.txt")) == "read: plain file\n"
        for name in ("plait.db", "plait.db-wal"):
            assert (data / name).exists()
            said = call(rt.mcp, "read_path", path=str(data / name))
            assert said == "read: " or said.startswith("error: "), (name, said[:80])
    finally:
        asyncio.run(rt.close())


def test_no_network_unless_the_config_allows_it(
    tmp_path: Path, manager_for: Any, listener: int
) -> None:
    closed = manager_for(fault_server(), workspace=tmp_path)
    said = call(closed, "connect", host="127.0.0.1", port=listener)
    assert said.startswith("error: ")
    opened = manager_for(fault_server(network=True), workspace=tmp_path)
    assert call(opened, "connect", host="127.0.0.1", port=listener) == "connected"


def test_writes_land_only_in_the_workspace(tmp_path: Path, manager_for: Any) -> None:
    ws, outside = tmp_path / "ws", tmp_path / "outside"
    ws.mkdir()
    outside.mkdir()
    manager = manager_for(fault_server(ro_binds=(str(outside),)), workspace=ws)
    assert call(manager, "write_path", path=str(ws / "in.txt"), text="in") == "written"
    assert (ws / "in.txt").read_text() == "in"
    said = call(manager, "write_path", path=str(outside / "out.txt"), text="out")
    assert said.startswith("error: ") and "Read-only file system" in said
    assert not (outside / "out.txt").exists()
    said = call(manager, "write_path", path=str(tmp_path / "next-to-ws.txt"), text="out")
    assert said.startswith("error: ")
    assert not (tmp_path / "next-to-ws.txt").exists()


def test_a_server_run_outside_the_sandbox_is_marked_on_every_result(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from plait.domain.policy import Action, Policy
    from plait.domain.session import Session

    ws = tmp_path / "ws"
    ws.mkdir()
    monkeypatch.chdir(ws)
    call_peek = {"name": "mcp__fault__peek", "arguments": {}, "id": "c1"}
    model = ScriptedModel(
        {"version": 1, "assistant": [{"tool_calls": [call_peek]}, {"text": "done"}]}
    )
    rt = Runtime.open(
        db=f"sqlite:///{tmp_path / 'plait.db'}",
        model=model,
        mcp_servers={"fault": fault_server(sandbox=False)},
        policy=Policy(other=Action.ALLOW),
    )

    async def go() -> str:
        try:
            await rt.store.create_session(Session(id="s1", created_at=1.0, workspace=str(ws)))
            result = await rt.service.send("s1", "peek")
            (message,) = [m.message for m in result.messages if m.message.kind == "tool_result"]
            return message.result.content
        finally:
            await rt.close()

    content = asyncio.run(go())
    assert content == "[ran outside the sandbox: MCP server 'fault']\npeeked"


def test_without_bubblewrap_a_sandboxed_server_names_the_fix(
    tmp_path: Path, manager_for: Any
) -> None:
    from plait.adapters.mcp import McpServerError, list_mcp_tools
    from plait.adapters.tools import SandboxSettings

    manager = manager_for(
        fault_server(), workspace=tmp_path, sandbox=SandboxSettings(bwrap="no-such-bwrap")
    )
    with pytest.raises(McpServerError) as info:
        list_mcp_tools(manager)
    message = info.value.message
    assert "MCP server 'fault'" in message and "no-such-bwrap" in message
    assert "sandbox = false in [mcp.servers.fault]" in message
