"""Fixtures for the workspace tools: a workspace beside an 'outside' directory holding a
secret, and helpers that run a tool the way the application does."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from plait.adapters.tools import WorkspaceLimits, _paths, _tree, workspace_tools
from plait.application.ports import Tool, ToolInvocation
from plait.domain.errors import ToolError
from plait.domain.messages import ToolCall

SECRET = "top secret\n"

Call = Callable[..., str]
Fails = Callable[..., ToolError]


class _OsProxy:
    """The ``os`` module with some functions replaced, seen only by ``_paths`` and ``_tree``."""

    def __init__(self, overrides: dict[str, Any]) -> None:
        self._overrides = overrides

    def __getattr__(self, name: str) -> Any:
        return self._overrides.get(name) or getattr(os, name)


def patch_os(monkeypatch: pytest.MonkeyPatch, **overrides: Any) -> None:
    """Replace ``os`` functions as used by the path layer (e.g. to interleave a race)."""
    proxy = _OsProxy(overrides)
    monkeypatch.setattr(_paths, "os", proxy)
    monkeypatch.setattr(_tree, "os", proxy)


def tools_by_name(limits: WorkspaceLimits | None = None) -> dict[str, Tool]:
    return {t.spec.name: t for t in workspace_tools(limits=limits)}


def run_tool(tool: Tool, workspace: Path | str | None, **arguments: Any) -> str:
    invocation = ToolInvocation(
        call=ToolCall.create(id="call_1", name=tool.spec.name, arguments=arguments),
        session_id="ses_1",
        run_id="run_1",
        workspace=None if workspace is None else str(workspace),
        idempotency_key="key_1",
    )
    output = asyncio.run(tool.execute(invocation))
    assert output.media_type == "text/plain"
    assert not output.failed
    return output.content


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    path = tmp_path / "outside"
    path.mkdir()
    (path / "secret.txt").write_text(SECRET)
    return path


@pytest.fixture
def ws(tmp_path: Path, outside: Path) -> Path:
    path = tmp_path / "ws"
    path.mkdir()
    return path


@pytest.fixture
def call(ws: Path) -> Call:
    """``call("read_file", path="a.txt")``: the tool's output in the ``ws`` workspace."""
    tools = tools_by_name()

    def run(name: str, **arguments: Any) -> str:
        return run_tool(tools[name], ws, **arguments)

    return run


@pytest.fixture
def fails(ws: Path, tmp_path: Path) -> Fails:
    """``fails("read_file", path="../x")``: the ToolError the call raises. Also checks
    that the message does not leak the host path of the workspace."""
    tools = tools_by_name()

    def run(name: str, **arguments: Any) -> ToolError:
        with pytest.raises(ToolError) as info:
            run_tool(tools[name], ws, **arguments)
        error = info.value
        assert str(tmp_path) not in error.message or str(tmp_path) in str(arguments)
        assert str(tmp_path) not in str(error.details) or str(tmp_path) in str(arguments)
        return error

    return run
