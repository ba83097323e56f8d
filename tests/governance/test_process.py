"""A run waiting for approval survives its process: real `plait` processes, a SQLite
store, the policy from PLAIT_POLICY."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

POLICY = """\
version = 1

[[rules]]
name = "ask-notes"
tools = ["write_file"]
paths = ["notes/**"]
action = "approve"
reason = "notes are reviewed by a person"
"""

SCRIPT = {
    "version": 1,
    "assistant": [
        {
            "tool_calls": [
                {
                    "name": "write_file",
                    "arguments": {"path": "notes/a.txt", "content": "hi\n"},
                    "id": "c1",
                }
            ]
        },
        {"text": "Wrote the note."},
    ],
}


class Plait:
    def __init__(self, tmp_path: Path) -> None:
        (tmp_path / "policy.toml").write_text(POLICY)
        (tmp_path / "script.json").write_text(json.dumps(SCRIPT))
        self.cwd = tmp_path
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("PLAIT_")}
        self.env.update(
            XDG_DATA_HOME=str(tmp_path / "data"),
            PLAIT_DB=f"sqlite:///{tmp_path / 'plait.db'}",
            PLAIT_POLICY=str(tmp_path / "policy.toml"),
            PLAIT_MODEL=f"scripted:{tmp_path / 'script.json'}",
        )

    def __call__(self, *argv: str, code: int = 0) -> Any:
        done = subprocess.run(
            [sys.executable, "-m", "plait.entrypoints.cli.main", *argv, "--json"],
            cwd=self.cwd, env=self.env, capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert done.returncode == code, done.stderr + done.stdout
        return json.loads(done.stdout)


@pytest.mark.slow
def test_a_waiting_run_survives_its_process_and_continues_after_approval(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    (ws / "notes").mkdir(parents=True)
    plait = Plait(tmp_path)
    sid = plait("sessions", "new", "--workspace", str(ws))["session_id"]
    sent = plait("send", sid, "write the note", code=1)
    assert sent["status"] == "awaiting_approval"
    assert not (ws / "notes" / "a.txt").exists()
    (pending,) = plait("approvals", "list", "--pending")["approvals"]
    assert (pending["call_id"], pending["scope"]) == ("c1", ["notes/a.txt"])
    assert pending["reason"] == "notes are reviewed by a person"
    # a new process resuming before anyone decided: still waiting, nothing written
    assert plait("runs", "resume", sent["run_id"], code=1)["status"] == "awaiting_approval"
    assert not (ws / "notes" / "a.txt").exists()
    # approving continues the run in the same command
    done = plait("approvals", "approve", pending["approval_id"], "--by", "ana", "--ttl", "5m")
    assert (done["continued"], done["run"]["status"]) == (True, "completed")
    assert (ws / "notes" / "a.txt").read_text() == "hi\n"
    shown = plait("runs", "show", sent["run_id"])
    (execution,) = shown["executions"]
    assert (execution["decision"], execution["decided_by"]) == ("allow", "user:ana")
    assert execution["result_status"] == "succeeded"
    (used,) = plait("approvals", "list")["approvals"]
    assert (used["status"], used["consumed_by"]) == ("consumed", "c1")
