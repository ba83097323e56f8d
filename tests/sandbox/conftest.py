"""Fixtures for the sandbox tests: a workspace beside an 'outside' directory, a helper
that runs ``run_command`` the way the application does, and a snapshot of what a test
must find unchanged afterwards.

Tests that need a working bubblewrap take the ``bwrap`` fixture: without one they are
skipped on a developer machine, but FAIL when ``CI=true`` (CI must really run them).
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from plait.adapters.tools import SandboxSettings, command_tools
from plait.adapters.tools.sandbox import sandbox_problem
from plait.application.ports import Tool, ToolInvocation, ToolOutput
from plait.domain.messages import ToolCall

SECRET = "host secret 7c1f\n"

Run = Callable[..., ToolOutput]
Snapshot = dict[str, tuple[str, str]]


@pytest.fixture
def bwrap() -> None:
    problem = sandbox_problem("bwrap")
    if problem is None:
        return
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI=true but the sandbox is unusable: {problem}")
    pytest.skip(f"sandbox unusable here: {problem}")


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    path = tmp_path / "ws"
    (path / "deploy").mkdir(parents=True)
    (path / "deploy" / "app.yaml").write_text("replicas: 3\n")
    (path / "src").mkdir()
    (path / "src" / "main.py").write_text("print('hi')\n")
    return path


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    path = tmp_path / "outside"
    path.mkdir()
    (path / "secret.txt").write_text(SECRET)
    return path


def snapshot(root: Path) -> Snapshot:
    """Every entry under ``root``: kind and content hash (or link target)."""
    seen: Snapshot = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath, name)
            rel = str(p.relative_to(root))
            if p.is_symlink():
                seen[rel] = ("link", os.readlink(p))
            elif p.is_dir():
                seen[rel] = ("dir", "")
            else:
                seen[rel] = ("file", hashlib.sha256(p.read_bytes()).hexdigest())
    return seen


def invocation(name: str, workspace: Path | None, cap: int = 32_000, **args: Any) -> ToolInvocation:
    return ToolInvocation(
        call=ToolCall.create(id="call_1", name=name, arguments=args),
        session_id="ses_1",
        run_id="run_1",
        workspace=None if workspace is None else str(workspace),
        idempotency_key="key_1",
        output_cap_bytes=cap,
    )


def tool(settings: SandboxSettings | None = None, name: str = "run_command", **kw: Any) -> Tool:
    return {t.spec.name: t for t in command_tools(settings, **kw)}[name]


def execute(t: Tool, workspace: Path | None, cap: int = 32_000, **args: Any) -> ToolOutput:
    output = asyncio.run(t.execute(invocation(t.spec.name, workspace, cap, **args)))
    if output.spool_path is not None:  # the runner's job in the application; ours here
        spooled = Path(output.spool_path)
        assert spooled.is_file()
        _spools.append(spooled)
    return output


_spools: list[Path] = []


@pytest.fixture(autouse=True)
def _remove_spools() -> Any:
    yield
    while _spools:
        _spools.pop().unlink(missing_ok=True)


@pytest.fixture
def run(ws: Path) -> Run:
    """``run(command, settings=None, **args)``: run_command in ``ws``."""

    def go(command: str, settings: SandboxSettings | None = None, **args: Any) -> ToolOutput:
        return execute(tool(settings), ws, command=command, **args)

    return go


@pytest.fixture
def git_installed() -> None:
    if shutil.which("git") is None:
        if os.environ.get("CI") == "true":
            pytest.fail("CI=true but git is not installed")
        pytest.skip("git is not installed")


@pytest.fixture
def home(tmp_path: Path) -> Path:
    path = tmp_path / "home"
    path.mkdir()
    return path


def host_git(home: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The user's own git, later, on the host (no system or global config of this machine)."""
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(home),
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_AUTHOR_NAME": "u",
        "GIT_AUTHOR_EMAIL": "u@example.invalid",
        "GIT_COMMITTER_NAME": "u",
        "GIT_COMMITTER_EMAIL": "u@example.invalid",
    }
    return subprocess.run(
        [shutil.which("git") or "git", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )


@pytest.fixture
def marker(tmp_path: Path) -> Path:
    """Where the planted command writes when it runs on the host."""
    return tmp_path / "PWNED"


def planted(marker: Path) -> str:
    return f"echo pwned > {marker}; false"
