"""Issue 20's attacks end to end: a scripted model, a policy that allows the calls, the
runtime as the CLI opens it. The store and the host's git come out untouched."""

from __future__ import annotations

import asyncio
import hashlib
from pathlib import Path
from typing import Any

import pytest

from plait.domain.messages import ToolStatus
from plait.domain.policy import Action, Policy, ToolRule
from plait.domain.runs import RunStatus
from plait.domain.session import Session
from plait.runtime import Runtime
from plait.testing import ScriptedModel
from tests.sandbox.conftest import host_git, planted

pytestmark = pytest.mark.usefixtures("bwrap")

ALLOW = Policy(
    rules=(
        ToolRule(name="shell", action=Action.ALLOW, tools=("run_command",), commands=(("*",),)),
        ToolRule(
            name="shell-args", action=Action.ALLOW, tools=("run_command",), commands=(("*", "*"),)
        ),
        ToolRule(name="files", action=Action.ALLOW, tools=("write_file",), paths=("**",)),
    )
)


def _script(*calls: tuple[str, dict[str, Any]]) -> ScriptedModel:
    turns: list[dict[str, Any]] = [
        {"tool_calls": [{"name": name, "arguments": args, "id": f"c{n}"}]}
        for n, (name, args) in enumerate(calls)
    ]
    return ScriptedModel({"version": 1, "assistant": [*turns, {"text": "done"}]})


def _run(db: str, ws: Path, model: ScriptedModel) -> list[Any]:
    rt = Runtime.open(db=db, model=model, policy=ALLOW)

    async def go() -> list[Any]:
        try:
            await rt.store.create_session(Session(id="s1", created_at=1.0, workspace=str(ws)))
            result = await rt.service.send("s1", "go")
            assert result.run.status is RunStatus.COMPLETED
            return list(await rt.store.get_executions(result.run.id))
        finally:
            await rt.close()

    return asyncio.run(go())


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["sqlite", "jsonl"])
def test_mv_data_data2_then_write_file_data2_plait_db(ws: Path, kind: str) -> None:
    (ws / "data").mkdir()
    db = f"sqlite:///{ws}/data/plait.db" if kind == "sqlite" else f"jsonl:///{ws}/data/plait.db"
    model = _script(
        ("run_command", {"command": "mv data data2"}),
        ("write_file", {"path": "data2/plait.db", "content": "PWNED"}),
        ("write_file", {"path": "data/plait.db", "content": "PWNED"}),
    )
    records = _run(db, ws, model)
    assert [r.decision for r in records] == ["allow", "allow", "allow"]
    assert [r.result_status for r in records] == [
        ToolStatus.FAILED,  # Device or resource busy
        ToolStatus.SUCCEEDED,  # a new file in a new directory: data was not moved
        ToolStatus.DENIED,  # the store
    ]
    assert sorted(p.name for p in (ws / "data2").iterdir()) == ["plait.db"]
    # The store still opens and holds the run.
    rt = Runtime.open(db=db, model=_script(), policy=ALLOW)
    try:
        session = asyncio.run(rt.store.get_session("s1"))
        assert session.id == "s1"
    finally:
        asyncio.run(rt.close())


@pytest.mark.slow
@pytest.mark.usefixtures("git_installed")
def test_write_file_into_nested_hooks_and_git_init_end_to_end(
    ws: Path, tmp_path: Path, home: Path, marker: Path
) -> None:
    sub = ws / "vendor" / "lib"
    sub.mkdir(parents=True)
    host_git(home, sub, "init", "-q")
    hook = sub / ".git" / "hooks" / "query-watchman"
    hook.write_text("#!/bin/sh\nexit 1\n")
    hook.chmod(0o755)
    host_git(home, sub, "config", "core.fsmonitor", ".git/hooks/query-watchman")
    before = _digest(hook)
    fsmonitor = f"git init -q && git config core.fsmonitor '{planted(marker)}'"
    model = _script(
        ("write_file", {"path": "vendor/lib/.git/hooks/query-watchman", "content": "x"}),
        ("run_command", {"command": fsmonitor}),
    )
    records = _run(f"sqlite:///{tmp_path}/plait.db", ws, model)
    assert [r.decision for r in records] == ["allow", "allow"]
    assert [r.result_status for r in records] == [ToolStatus.DENIED, ToolStatus.FAILED]
    assert _digest(hook) == before
    assert not (ws / ".git").exists()
    host_git(home, sub, "status")
    host_git(home, ws, "status")
    assert not marker.exists()
