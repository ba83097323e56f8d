"""Fixtures for the MCP tests: configs of the real servers (PyPI ones from the project's
dev dependencies, npm ones from ``tests/mcp/servers``, installed by ``.ci/run``), of the
project's own fault server, and a git workspace.

Without bubblewrap or the npm servers a test is skipped on a developer machine but FAILS
when ``CI=true``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from plait.adapters.mcp import McpManager, McpServerConfig
from plait.adapters.tools.sandbox import sandbox_problem

HERE = Path(__file__).resolve().parent
NODE_MODULES = HERE / "servers" / "node_modules"
FAULT_SERVER = HERE / "fault_server.py"
PYTHON_BINDS = tuple(dict.fromkeys((sys.prefix, sys.base_prefix)))
"""What a sandboxed Python server must read: this virtualenv and its interpreter."""


def _unavailable(why: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI=true but {why}")
    pytest.skip(why)


@pytest.fixture
def bwrap() -> None:
    problem = sandbox_problem("bwrap")
    if problem is not None:
        _unavailable(f"the sandbox is unusable: {problem}")


def python_server(name: str, script: str, *args: str, **kw: Any) -> McpServerConfig:
    """A server installed in this virtualenv (``mcp-server-git``) or a script path."""
    command = script if os.path.isabs(script) else os.path.join(sys.prefix, "bin", script)
    if script.endswith(".py"):
        command, args = sys.executable, (script, *args)
    binds = tuple(dict.fromkeys((*PYTHON_BINDS, *kw.pop("ro_binds", ()))))
    return McpServerConfig(name=name, command=command, args=args, ro_binds=binds, **kw)


def fault_server(name: str = "fault", **kw: Any) -> McpServerConfig:
    binds = (str(HERE), *kw.pop("ro_binds", ()))
    return python_server(name, str(FAULT_SERVER), ro_binds=binds, **kw)


def node_server(name: str, package: str, *args: str, **kw: Any) -> McpServerConfig:
    entry = NODE_MODULES / "@modelcontextprotocol" / package / "dist" / "index.js"
    if not entry.is_file():
        _unavailable(f"{entry} is missing: npm ci --prefix tests/mcp/servers (done by .ci/run)")
    return McpServerConfig(
        name=name, command="node", args=(str(entry), *args), ro_binds=(str(NODE_MODULES),), **kw
    )


@pytest.fixture
def git_ws(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A workspace that is a git repository with one commit, and the current directory
    (where servers are started to list their tools, as the CLI does)."""
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "README.md").write_text("hello\n")
    who = {"NAME": "t", "EMAIL": "t@example.com"}
    env = {
        **os.environ,
        **{f"GIT_{r}_{k}": v for r in ("AUTHOR", "COMMITTER") for k, v in who.items()},
    }
    for argv in (["init", "-q", "-b", "main"], ["add", "."], ["commit", "-qm", "first"]):
        subprocess.run(["git", *argv], cwd=ws, env=env, check=True)
    monkeypatch.chdir(ws)
    return ws


@pytest.fixture
def manager_for(tmp_path: Path) -> Iterator[Any]:
    """``manager_for(*configs, workspace=...)``: a manager closed after the test."""
    made: list[McpManager] = []

    def make(*configs: McpServerConfig, workspace: Path, **kw: Any) -> McpManager:
        kw.setdefault("environ", os.environ)
        manager = McpManager({c.name: c for c in configs}, workspace=str(workspace), **kw)
        made.append(manager)
        return manager

    yield make
    for manager in made:
        manager.close()
