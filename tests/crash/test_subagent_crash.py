"""SIGKILL of the parent's process while its sub-agent's child run is running: recovery
reattaches the parent's call to the child run, which is continued; its answer becomes the
call's result, and no tool ran twice."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.crash.harness import run_proc

pytestmark = pytest.mark.slow


def _cmd(command: str, directory: Path) -> list[str]:
    return [sys.executable, "-m", "tests.crash.subagent_proc", command, str(directory)]


def test_sigkill_while_the_child_runs_then_recover(tmp_path: Path) -> None:
    crashed = run_proc(_cmd("run", tmp_path))
    assert crashed.killed, crashed.describe()
    assert len((tmp_path / "effects.txt").read_text().splitlines()) == 1
    recovered = run_proc(_cmd("recover", tmp_path))
    data = recovered.data
    assert recovered.stderr == "", recovered.stderr
    assert data["reports"] == ["resumed", "skipped"]  # the child: its parent continues it
    assert data["results"] == [
        {"call_id": "d1", "status": "succeeded", "content": "counted: 7 things"}
    ]
    assert len(data["effects"]) == 1  # the child's tool did not run again
    assert data["runs"] == [[False, "completed"], [True, "completed"]]
