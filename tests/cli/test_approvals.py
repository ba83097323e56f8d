"""``plait approvals approve|deny`` continue the waiting run in the same command (the
embedded store, no worker), through the ApprovalDesk the HTTP API uses: an approved call
runs, a denied one reaches the model as ``denied``; the outcome is printed as ``send``
prints a run, and the exit status is send's."""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from plait.adapters.stores import open_store
from plait.entrypoints.cli.main import main

POLICY = """\
version = 1

[[rules]]
name = "ask-notes"
tools = ["write_file"]
paths = ["notes/**"]
action = "approve"
reason = "notes are reviewed by a person"
"""


def _write(call_id: str, path: str, content: str) -> dict[str, Any]:
    args = {"path": path, "content": content}
    return {"tool_calls": [{"name": "write_file", "arguments": args, "id": call_id}]}


ONE_NOTE = [_write("c1", "notes/a.txt", "hi\n"), {"text": "Done."}]
TWO_NOTES = [
    _write("c1", "notes/a.txt", "one\n"),
    _write("c2", "notes/b.txt", "two\n"),
    {"text": "Done."},
]


class Plait:
    """``plait`` in-process over a SQLite store, PLAIT_POLICY asking about notes/**."""

    def __init__(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str], mp: pytest.MonkeyPatch
    ) -> None:
        self.tmp = tmp_path
        self.capsys = capsys
        self.db = f"sqlite:///{tmp_path / 'plait.db'}"
        self.ws = tmp_path / "ws"
        (self.ws / "notes").mkdir(parents=True)
        (tmp_path / "policy.toml").write_text(POLICY)
        mp.setenv("PLAIT_POLICY", str(tmp_path / "policy.toml"))
        mp.delenv("PLAIT_MODEL", raising=False)
        mp.setattr("getpass.getuser", lambda: "ana")

    def run(self, *argv: str) -> tuple[int, str, str]:
        self.capsys.readouterr()
        code = main([*argv, "--db", self.db])
        out, err = self.capsys.readouterr()
        return code, out, err

    def json(self, *argv: str, code: int = 0) -> Any:
        got, out, err = self.run(*argv, "--json")
        assert got == code, err + out
        return json.loads(out)

    def waiting(self, turns: list[dict[str, Any]]) -> tuple[str, str]:
        """A run stopped at its first gated call: (run id, approval id)."""
        script = self.tmp / "script.json"
        script.write_text(json.dumps({"version": 1, "assistant": turns}))
        sid = self.json("sessions", "new", "--workspace", str(self.ws))["session_id"]
        sent = self.json("send", sid, "write the notes", "--model", f"scripted:{script}", code=1)
        assert sent["status"] == "awaiting_approval"
        (pending,) = self.json("approvals", "list", "--pending")["approvals"]
        return sent["run_id"], pending["approval_id"]

    def store(self) -> Any:
        return open_store(self.db, create=False)


@pytest.fixture
def plait(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> Plait:
    return Plait(tmp_path, capsys, monkeypatch)


def _kinds(messages: list[dict[str, Any]]) -> list[tuple[str, str | None]]:
    return [(m["kind"], m.get("status")) for m in messages]


@pytest.mark.slow
def test_approving_runs_the_call_and_the_run_to_its_end(plait: Plait) -> None:
    run_id, apr = plait.waiting(ONE_NOTE)
    done = plait.json("approvals", "approve", apr, "--ttl", "5m")
    assert (done["approval"]["approval_id"], done["approval"]["grantor"]) == (apr, "ana")
    assert done["continued"] is True and done["waiting_for"] == []
    assert (done["run"]["run_id"], done["run"]["status"]) == (run_id, "completed")
    assert _kinds(done["run"]["messages"]) == [("tool_result", "succeeded"), ("assistant", None)]
    assert done["run"]["messages"][1]["text"] == "Done."
    assert (plait.ws / "notes" / "a.txt").read_text() == "hi\n"
    shown = plait.json("runs", "show", run_id)
    (execution,) = shown["executions"]
    assert (execution["decision"], execution["decided_by"]) == ("allow", "user:ana")
    (used,) = plait.json("approvals", "list")["approvals"]
    assert (used["status"], used["consumed_by"]) == ("consumed", "c1")
    # nothing is left to resume, and a decided request cannot be decided again
    code, out, _ = plait.run("runs", "resume", run_id, "--json")
    assert code == 2 and json.loads(out)["error"]["code"] == "run_state"
    code, out, _ = plait.run("approvals", "deny", apr, "--reason", "no", "--json")
    assert code == 2 and json.loads(out)["error"]["code"] == "run_state"


def test_denying_continues_and_the_model_reads_the_reason(plait: Plait) -> None:
    run_id, apr = plait.waiting(ONE_NOTE)
    code, out, err = plait.run("approvals", "deny", apr, "--reason", "no notes today")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == f"denied {apr} (write_file, call c1)"
    assert "[3] write_file [c1] denied" in lines
    # who denied it once, then what the deciders before said (issue 26 item 6)
    assert "denied by user:ana: no notes today (policy:" in out and "asked a person)" in out
    assert "denied by ana" not in out and "(after" not in out
    assert "status      completed" in out
    assert not (plait.ws / "notes" / "a.txt").exists()
    history = plait.json("history", plait.json("runs", "show", run_id)["session_id"])
    result = next(m for m in history["messages"] if m["kind"] == "tool_result")
    assert (result["status"], result["call_id"]) == ("denied", "c1")
    assert "no notes today" in result["reason"]
    assert history["messages"][-1]["text"] == "Done."


def test_a_run_that_asks_again_stops_at_the_next_request_with_send_s_exit_status(
    plait: Plait,
) -> None:
    run_id, first = plait.waiting(TWO_NOTES)
    code, out, _ = plait.run("approvals", "approve", first)
    assert code == 1  # the run drove on and waits again: not completed
    assert "status      awaiting_approval" in out and "waits for 1 more decision" in out
    (second,) = plait.json("approvals", "list", "--pending")["approvals"]
    assert f"plait approvals approve {second['approval_id']}" in out
    assert (plait.ws / "notes" / "a.txt").read_text() == "one\n"
    done = plait.json("approvals", "deny", second["approval_id"], "--reason", "one is enough")
    assert (done["run"]["status"], done["continued"]) == ("completed", True)
    assert _kinds(done["run"]["messages"]) == [("tool_result", "denied"), ("assistant", None)]
    assert not (plait.ws / "notes" / "b.txt").exists()
    assert plait.json("runs", "show", run_id)["usage"]["steps"] == 3


def test_with_another_request_pending_the_decision_is_recorded_and_the_run_waits(
    plait: Plait,
) -> None:
    run_id, apr = plait.waiting(ONE_NOTE)

    async def another_request() -> None:
        store = plait.store()
        try:
            (first,) = await store.list_approvals()
            await store.request_approval(replace(first, id="apr_other", call_id="c0"))
        finally:
            await store.close()

    asyncio.run(another_request())
    waits = plait.json("approvals", "approve", apr)
    assert (waits["continued"], waits["run"]["status"]) == (False, "awaiting_approval")
    assert waits["run"]["messages"] == []
    assert [p["approval_id"] for p in waits["waiting_for"]] == ["apr_other"]
    assert not (plait.ws / "notes" / "a.txt").exists()
    code, out, _ = plait.run("approvals", "deny", "apr_other", "--reason", "stale")
    assert code == 0 and "status      completed" in out
    assert (plait.ws / "notes" / "a.txt").read_text() == "hi\n"
    assert plait.json("runs", "show", run_id)["status"] == "completed"


def test_queue_leaves_the_run_to_a_worker(plait: Plait) -> None:
    run_id, apr = plait.waiting(ONE_NOTE)
    code, out, _ = plait.run("approvals", "approve", apr, "--queue")
    assert code == 0 and f"run {run_id} is queued again: a worker continues it" in out
    assert plait.json("runs", "show", run_id)["status"] == "queued"
    assert not (plait.ws / "notes" / "a.txt").exists()


def test_a_run_that_ended_meanwhile_only_gets_the_decision_recorded(plait: Plait) -> None:
    run_id, apr = plait.waiting(ONE_NOTE)
    assert plait.json("runs", "cancel", run_id)["status"] == "cancelled"
    code, out, _ = plait.run("approvals", "approve", apr)
    assert code == 0 and f"run {run_id} already ended (cancelled): nothing to continue" in out
    assert not (plait.ws / "notes" / "a.txt").exists()


def test_a_run_whose_model_cannot_be_opened_is_refused_before_the_decision(plait: Plait) -> None:
    run_id, apr = plait.waiting(ONE_NOTE)
    (plait.tmp / "script.json").unlink()
    code, out, err = plait.run("approvals", "approve", apr, "--json")
    assert code == 2 and json.loads(out)["error"]["code"] == "config_error"
    assert "cannot be opened here" in err
    (still,) = plait.json("approvals", "list", "--pending")["approvals"]  # nothing was written
    assert still["approval_id"] == apr
    assert plait.json("runs", "show", run_id)["status"] == "awaiting_approval"


def test_bad_decisions_are_clear_errors(plait: Plait) -> None:
    _, apr = plait.waiting(ONE_NOTE)
    code, _, err = plait.run("approvals", "deny", apr)
    assert code == 2 and "--reason" in err
    code, _, err = plait.run("approvals", "deny", apr, "--reason", "  ")
    assert code == 2 and "--reason must say why" in err
    code, _, err = plait.run("approvals", "approve", apr, "--ttl", "soon")
    assert code == 2 and "--ttl 'soon' is not a duration" in err
    code, out, err = plait.run("approvals", "approve", "apr_nope", "--json")
    assert code == 2 and "approval 'apr_nope' not found" in err
    assert json.loads(out)["error"]["code"] == "approval_not_found"
    (still,) = plait.json("approvals", "list", "--pending")["approvals"]
    assert still["approval_id"] == apr
