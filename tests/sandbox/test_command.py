"""run_command and run_tests: results, arguments, refusal without a sandbox, effects."""

from __future__ import annotations

import asyncio
import pickle
from pathlib import Path
from typing import Any

import pytest

from plait.adapters.tools import SandboxSettings, SandboxUnavailableError, session_tools
from plait.adapters.tools.sandbox import sandbox_problem
from plait.domain.errors import ToolError
from plait.domain.tools import EffectClass
from tests.sandbox.conftest import Run, execute, invocation, tool
from tests.sandbox.test_escape import _wait_gone


@pytest.mark.usefixtures("bwrap")
def test_result_has_exit_code_and_both_streams(run: Run) -> None:
    out = run("echo out; echo err >&2; exit 3")
    assert out.failed
    assert out.spool_path is None
    assert out.content == (
        "$ echo out; echo err >&2; exit 3\n"
        + out.content.splitlines()[1]
        + "\n--- stdout (4 bytes) ---\nout\n\n--- stderr (4 bytes) ---\nerr\n"
    )
    assert out.content.splitlines()[1].startswith("exit code 3 [ended: exit, ")


@pytest.mark.usefixtures("bwrap")
def test_success_and_cwd(run: Run, ws: Path) -> None:
    out = run("pwd; ls", cwd="src")
    assert not out.failed
    assert f"{ws.resolve()}/src\nmain.py\n" in out.content
    assert f"---\n{ws.resolve()}/deploy\n" in run("pwd", cwd=str(ws / "deploy")).content


@pytest.mark.usefixtures("bwrap")
def test_killed_by_a_signal(run: Run) -> None:
    out = run("kill -KILL $$")
    assert out.failed
    assert "killed by SIGKILL [ended: signal" in out.content


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({"cwd": "../"}, "outside the workspace"),
        ({"cwd": "/etc"}, "outside the workspace"),
        ({"cwd": "nope"}, "not a directory"),
        ({"cwd": "src/main.py"}, "not a directory"),
        ({"timeout_seconds": 0}, r"\$\.timeout_seconds: Input should be greater than 0"),
        ({"timeout_seconds": 5000}, "at most 1800"),
    ],
)
def test_bad_arguments(ws: Path, args: dict[str, Any], message: str) -> None:
    with pytest.raises(ToolError, match=message):
        execute(tool(), ws, command="true", **args)


def test_cwd_symlink_leading_out_is_refused(ws: Path, outside: Path) -> None:
    (ws / "out").symlink_to(outside)
    with pytest.raises(ToolError, match="leads outside the workspace"):
        execute(tool(), ws, command="true", cwd="out")


def test_no_workspace(ws: Path) -> None:
    with pytest.raises(ToolError, match="no workspace"):
        execute(tool(), None, command="true")


def test_missing_bwrap_is_refused_with_the_fix(ws: Path) -> None:
    settings = SandboxSettings(bwrap="/nonexistent/plait-bwrap")
    with pytest.raises(SandboxUnavailableError) as caught:
        execute(tool(settings), ws, command="touch made")
    assert "install bubblewrap" in caught.value.message
    assert "apt-get install bubblewrap" in caught.value.message
    assert caught.value.code == "sandbox_unavailable"
    assert not (ws / "made").exists()
    again = pickle.loads(pickle.dumps(caught.value))
    assert again.message == caught.value.message


def test_unusable_namespaces_are_refused_with_the_fix(ws: Path, tmp_path: Path) -> None:
    fake = tmp_path / "fake-bwrap"
    fake.write_text(
        "#!/bin/sh\necho 'bwrap: No permissions to creating new namespace' >&2\nexit 1\n"
    )
    fake.chmod(0o755)
    with pytest.raises(SandboxUnavailableError, match="user namespaces") as caught:
        execute(tool(SandboxSettings(bwrap=str(fake))), ws, command="touch made")
    assert "No permissions to creating new namespace" in caught.value.message
    assert not (ws / "made").exists()


def test_unsandboxed_only_when_allowed_and_marked(
    ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = SandboxSettings(bwrap="/nonexistent/plait-bwrap", allow_unsandboxed=True)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-unsandboxed-0456")
    out = execute(tool(settings), ws, command="echo $OPENAI_API_KEY; touch made; pwd")
    assert out.content.startswith("UNSANDBOXED: this command ran without the sandbox.\n")
    assert "0456" not in out.content  # the environment is scrubbed all the same
    assert (ws / "made").exists()
    assert str(ws.resolve()) in out.content


@pytest.mark.slow
def test_unsandboxed_timeout_kills_the_group(ws: Path) -> None:
    settings = SandboxSettings(bwrap="/nonexistent/plait-bwrap", allow_unsandboxed=True)
    out = execute(
        tool(settings), ws, command="trap '' TERM; sleep 600 & sleep 600", timeout_seconds=0.5
    )
    assert out.failed
    assert "[ended: timeout" in out.content


def test_problem_is_none_when_bwrap_works() -> None:
    problem = sandbox_problem("bwrap")
    assert problem is None or "bubblewrap" in problem


def test_run_tests_runs_the_configured_command(ws: Path) -> None:
    assert "run_tests" not in {t.spec.name for t in session_tools()}
    settings = SandboxSettings(
        test_command="echo tests ran", bwrap="/nonexistent/x", allow_unsandboxed=True
    )
    tools = {t.spec.name: t for t in session_tools(sandbox=settings)}
    assert {"read_file", "write_file", "run_command", "run_tests"} <= set(tools)
    assert tools["run_tests"].spec.effect is EffectClass.IDEMPOTENT
    assert tools["run_tests"].spec.parameters["properties"].keys() == {"timeout_seconds"}
    out = execute(tools["run_tests"], ws)
    assert "tests ran" in out.content


def test_effect_classes_from_the_settings() -> None:
    settings = SandboxSettings(
        test_command="pytest -q", command_effects={"git status": EffectClass.READ_ONLY}
    )
    effect_of = tool(settings).effect_of
    assert effect_of is not None
    assert effect_of({"command": " git status "}) is EffectClass.READ_ONLY
    assert effect_of({"command": "pytest -q"}) is EffectClass.IDEMPOTENT
    assert effect_of({"command": "rm -rf build"}) is EffectClass.SIDE_EFFECT
    assert tool(settings).spec.effect is EffectClass.SIDE_EFFECT


@pytest.mark.usefixtures("bwrap")
def test_binary_output_stays_within_the_cap(ws: Path) -> None:
    out = execute(tool(), ws, 4000, command="head -c 100000 /dev/urandom; echo é")
    assert len(out.content.encode()) <= 3800
    assert out.spool_path is not None
    assert Path(out.spool_path).stat().st_size > 100000
    long = "echo " + "é" * 300
    shown = execute(tool(), ws, 4000, command=long).content.splitlines()[0]
    assert shown.startswith("$ echo é") and shown.endswith("...")
    assert len(shown.encode()) <= 210


@pytest.mark.slow
def test_a_workspace_holding_the_system_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    def walked(root: str) -> None:
        raise AssertionError(f"the git scan walked {root} before the refusal")

    if sandbox_problem() is None:  # sandboxed: refused before anything reads the workspace
        monkeypatch.setattr("plait.adapters.tools._git.scan_git", walked)
    with pytest.raises(ToolError, match="contains system directories"):
        execute(tool(), Path("/"), command="true")


@pytest.mark.usefixtures("bwrap")
def test_cancelling_the_call_kills_the_tree(ws: Path) -> None:
    marker = "654321.5"
    t = tool()

    async def cancel_midway() -> None:
        task = asyncio.create_task(
            t.execute(invocation("run_command", ws, command=f"touch started; sleep {marker}"))
        )
        for _ in range(3000):  # until the command is surely running
            if (ws / "started").exists():
                break
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(cancel_midway())
    assert t.stoppable
    assert _wait_gone(marker) == []
