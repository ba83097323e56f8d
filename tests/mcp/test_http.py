"""A streamable HTTP MCP server on a loopback port: tools listed and called through plait,
headers resolved from the environment (secrets never written in the config)."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from plait.adapters.mcp import McpServerConfig, McpServerError, list_mcp_tools
from tests.mcp.conftest import FAULT_SERVER

pytestmark = pytest.mark.slow


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@pytest.fixture
def http_server(tmp_path: Path) -> Iterator[str]:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, str(FAULT_SERVER), "--http", str(port)],
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert proc.poll() is None and time.monotonic() < deadline
                time.sleep(0.05)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_an_http_server_is_listed_and_called_with_headers_from_the_environment(
    tmp_path: Path, http_server: str, manager_for: Any
) -> None:
    config = McpServerConfig(
        name="remote", url=http_server, headers={"Authorization": "Bearer ${REMOTE_TOKEN}"}
    )
    manager = manager_for(config, workspace=tmp_path, environ={"REMOTE_TOKEN": "s3cret"})
    names = {i.remote_name for i in list_mcp_tools(manager)}
    assert {"peek", "auth_header", "write_note"} <= names
    result = manager.run_sync(
        manager.call_tool("remote", "auth_header", {}, workspace=None, meta={}, time_limit=None)
    )
    assert [getattr(b, "text", None) for b in result.content] == ["Bearer s3cret"]


def test_a_missing_secret_is_one_error_naming_the_server_and_variable(
    tmp_path: Path, http_server: str, manager_for: Any
) -> None:
    config = McpServerConfig(
        name="remote", url=http_server, headers={"Authorization": "Bearer ${REMOTE_TOKEN}"}
    )
    manager = manager_for(config, workspace=tmp_path, environ={})
    with pytest.raises(McpServerError, match=r"MCP server 'remote' did not start.*REMOTE_TOKEN"):
        list_mcp_tools(manager)
