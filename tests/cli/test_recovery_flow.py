"""Crashes, recovery, resolution and cancellation driven through the CLI.

A crashed run is made with the Python API (an ``AgentService`` whose checkpoint hook
"kills the process" at a persistence point, as in ``tests/application/test_recovery.py``)
over a SQLite file; then ``plait runs recover|show|resolve|resume|cancel`` take it from
there with the same ``--db`` and ``--model``."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from plait.adapters.stores import open_store
from plait.adapters.system import RandomIds
from plait.adapters.tools import workspace_tools
from plait.application.service import AgentService
from plait.domain.runs import Budget
from plait.testing import FixedClock, ScriptedModel
from tests.cli.conftest import Plait, Result, call, check_run, snapshot, write_script


class Died(BaseException):
    """Stands for the process dying at a checkpoint."""


SCRIPT: dict[str, Any] = {
    "version": 1,
    "model": "recovery",
    "assistant": [
        {
            "text": "Writing the file.",
            "tool_calls": [call("write_file", "c_write", path="out.txt", content="done\n")],
        },
        {"text": "Written and verified."},
        {"text": "Anything else?"},
    ],
}

READ_SCRIPT: dict[str, Any] = {
    "version": 1,
    "model": "recovery",
    "assistant": [
        {"text": "Reading.", "tool_calls": [call("read_file", "c_read", path="notes.txt")]},
        {"text": "It says hello."},
    ],
}


@dataclass
class Crashed:
    session_id: str
    run_id: str
    model: str


def crash(
    url: str,
    workspace: Path,
    model: str,
    point: str,
    *,
    clock: FixedClock | None = None,
    lease_seconds: float = 60.0,
    owner: str = "dead-worker",
) -> Crashed:
    """Send a message through the Python API and 'die' at ``point``; the run is left
    ``running`` with the dead owner's lease."""

    def hook(name: str) -> None:
        if name == point:
            raise Died(point)

    async def go() -> Crashed:
        store = open_store(url)
        try:
            service = AgentService.build(
                store=store,
                artifacts=store,
                model=ScriptedModel.from_file(model.removeprefix("scripted:")),
                tools=workspace_tools(),
                clock=clock or FixedClock(),  # 2023: the lease is long expired
                ids=RandomIds(),
                owner=owner,
                lease_seconds=lease_seconds,
                checkpoint=hook,
                # the deadline is absolute and survives the crash: a run that died "in
                # 2023" would be past it when recovered now
                budget=Budget(deadline_seconds=None),
            )
            session = await service.create_session(workspace=str(workspace))
            with pytest.raises(Died):
                await service.send(session.id, "please write out.txt")
            (run,) = await store.list_runs(session_id=session.id)
            return Crashed(session.id, run.id, model)
        finally:
            await store.close()

    return asyncio.run(go())


@pytest.fixture
def model(tmp_path: Path) -> str:
    return write_script(tmp_path, "recovery", SCRIPT)


@pytest.fixture
def crashed_in_write(plait: Plait, workspace: Path, model: str) -> Crashed:
    c = crash(plait.db, workspace, model, "tool_returned")
    assert (workspace / "out.txt").read_text(encoding="utf-8") == "done\n"  # it happened
    return c


def _waits(r: Result) -> Result:
    """``runs recover`` drove a run that now awaits resolution: exit status 1."""
    assert r.code == 1, (r.code, r.out, r.err)
    return r


@pytest.mark.slow
def test_unknown_side_effect_recover_show_resolve_resume(
    plait: Plait, workspace: Path, crashed_in_write: Crashed
) -> None:
    c = crashed_in_write
    (before,) = plait.json("runs", "list")["runs"]
    assert before["status"] == "running"
    assert before["lease"]["owner"] == "dead-worker"
    # a person changes the file meanwhile: recovery must not write it again
    (workspace / "out.txt").write_text("edited by a person\n", encoding="utf-8")

    recovered = plait("runs", "recover", "--model", c.model, "--json")
    assert recovered.code == 1, recovered.err  # the run it drove ended awaiting resolution
    (report,) = recovered.json["recoveries"]
    assert set(report) == {"run_id", "outcome", "detail", "run", "messages"}
    assert report["run_id"] == c.run_id
    assert report["outcome"] == "resumed"
    assert "awaiting_resolution" in report["detail"]
    check_run(report["run"])
    assert report["run"]["status"] == "awaiting_resolution"
    assert (workspace / "out.txt").read_text(encoding="utf-8") == "edited by a person\n"
    # a second recover leaves it to the person, saying so
    (again,) = plait.json("runs", "recover", "--model", c.model)["recoveries"]
    assert again["outcome"] == "skipped"
    assert again["detail"] == "run is awaiting_resolution, not running"

    shown = plait.json("runs", "show", c.run_id)
    assert shown["status"] == "awaiting_resolution"
    (execution,) = shown["executions"]
    assert execution["call_id"] == "c_write"
    assert execution["tool_name"] == "write_file"
    assert execution["effect"] == "side_effect"
    assert execution["state"] == "started"
    assert execution["result_status"] == "unknown"
    assert execution["settled_at"] is None
    text = plait.ok("runs", "show", c.run_id).out
    assert "status      awaiting_resolution" in text
    assert "call c_write  write_file  side_effect  started  → unknown" in text

    # while it waits, the session takes no new run and the run cannot be resumed
    state = snapshot(plait.db)
    busy = plait("send", c.session_id, "hello?", "--model", c.model, "--json")
    assert busy.code == 2
    assert busy.json["error"]["code"] == "session_busy"
    not_yet = plait("runs", "resume", c.run_id, "--model", c.model, "--json")
    assert not_yet.code == 2
    assert not_yet.json["error"]["code"] == "run_state"
    assert "unknown outcome: c_write" in not_yet.json["error"]["message"]
    wrong_call = plait(
        "runs", "resolve", c.run_id, "--call", "c_nope", "--status", "succeeded", "--note", "x"
    )
    assert wrong_call.code == 2
    assert "'c_nope'" in wrong_call.err and "unresolved calls: c_write" in wrong_call.err
    blank = plait(
        "runs", "resolve", c.run_id, "--call", "c_write", "--status", "succeeded", "--note", " "
    )
    assert blank.code == 2 and "note" in blank.err
    assert snapshot(plait.db) == state

    resolved = plait.json(
        "runs",
        "resolve",
        c.run_id,
        "--call",
        "c_write",
        "--status",
        "succeeded",
        "--note",
        "out.txt exists; a person edited it since",
        "--by",
        "alice",
    )
    check_run(resolved)
    assert resolved["run_id"] == c.run_id
    assert resolved["lease"] is None
    # the call ran (in the process that died): it counts, though a person settled it
    assert resolved["usage"]["tool_calls"] == 1
    (execution,) = plait.json("runs", "show", c.run_id)["executions"]
    assert execution["result_status"] == "succeeded"
    assert execution["state"] == "settled"

    resumed = plait("runs", "resume", c.run_id, "--model", c.model, "--json")
    assert resumed.code == 0, resumed.err
    check_run(resumed.json, "messages", "output")
    assert resumed.json["status"] == "completed"
    assert [m.get("text") for m in resumed.json["messages"]] == ["Written and verified."]

    history = plait.history(c.session_id)
    assert [m["seq"] for m in history] == [1, 2, 3, 4]
    assert [m["kind"] for m in history] == ["user", "assistant", "tool_result", "assistant"]
    assert history[2]["call_id"] == "c_write"
    assert history[2]["status"] == "succeeded"
    assert history[2]["content"] == (
        "out.txt exists; a person edited it since (outcome verified by alice)"
    )
    assert (workspace / "out.txt").read_text(encoding="utf-8") == "edited by a person\n"
    session = plait.json("sessions", "list")["sessions"][0]
    assert session["active_run_id"] is None

    # and the session goes on with the same script in a new 'process'
    more = plait.json("send", c.session_id, "thanks", "--model", c.model)
    assert more["messages"][-1]["text"] == "Anything else?"


@pytest.mark.slow
def test_resolve_text_output_says_how_to_continue(plait: Plait, crashed_in_write: Crashed) -> None:
    c = crashed_in_write
    _waits(plait("runs", "recover", "--run", c.run_id, "--model", c.model))
    r = plait.ok(
        "runs", "resolve", c.run_id, "--call", "c_write", "--status", "failed", "--note", "absent"
    )
    assert f"call c_write of run {c.run_id} resolved as failed" in r.out
    assert f"plait runs resume {c.run_id}" in r.out
    resumed = plait("runs", "resume", c.run_id, "--model", c.model)
    assert resumed.code == 0
    assert "status      completed" in resumed.out
    result = plait.history(c.session_id)[2]
    assert result["status"] == "failed"


def test_resolve_with_queue_leaves_the_run_to_a_worker(
    plait: Plait, crashed_in_write: Crashed
) -> None:
    c = crashed_in_write
    _waits(plait("runs", "recover", "--run", c.run_id, "--model", c.model))
    argv = ["runs", "resolve", c.run_id, "--call", "c_write", "--status", "failed"]
    r = plait.ok(*argv, "--note", "absent", "--queue")
    assert r.out.strip().endswith("resolved as failed; queued for a worker")
    shown = plait.json("runs", "show", c.run_id)
    assert shown["status"] == "queued" and shown["error"] is None
    assert plait.json("sessions", "list")["sessions"][0]["active_run_id"] == c.run_id


def test_recover_text_output(plait: Plait, crashed_in_write: Crashed) -> None:
    c = crashed_in_write
    r = _waits(plait("runs", "recover", "--model", c.model))
    assert r.out.strip() == f"{c.run_id}: resumed (run is awaiting_resolution)"


def test_cancel_a_run_awaiting_resolution(plait: Plait, crashed_in_write: Crashed) -> None:
    c = crashed_in_write
    _waits(plait("runs", "recover", "--model", c.model))
    r = plait.ok("runs", "cancel", c.run_id)
    assert r.out.strip() == f"cancelled run {c.run_id} (cancelled)"
    run = plait.json("runs", "show", c.run_id)
    assert run["status"] == "cancelled"
    assert run["error"]["code"] == "cancelled"
    assert run["ended_at"] is not None
    history = plait.history(c.session_id)
    assert [m["kind"] for m in history] == ["user", "assistant", "tool_result"]
    assert history[2]["call_id"] == "c_write"
    assert history[2]["status"] == "unknown"  # left unknown in the history, as documented
    assert plait.json("sessions", "list")["sessions"][0]["active_run_id"] is None
    # resolving or resuming a cancelled run is refused
    late = plait(
        "runs", "resolve", c.run_id, "--call", "c_write", "--status", "succeeded", "--note", "x"
    )
    assert late.code == 2 and "is cancelled" in late.err


def test_recover_reruns_an_unfinished_read(plait: Plait, workspace: Path, tmp_path: Path) -> None:
    model = write_script(tmp_path, "read", READ_SCRIPT)
    c = crash(plait.db, workspace, model, "assistant_saved")
    r = plait("runs", "recover", "--model", model, "--json")
    assert r.code == 0
    (report,) = r.json["recoveries"]
    assert report["outcome"] == "resumed"
    assert report["run"]["status"] == "completed"
    assert [m["kind"] for m in report["messages"]] == ["tool_result", "assistant"]
    assert report["messages"][0]["status"] == "succeeded"
    history = plait.history(c.session_id)
    assert [m["seq"] for m in history] == [1, 2, 3, 4]
    assert history[-1]["text"] == "It says hello."


def test_recover_after_a_crash_before_the_model_answered(
    plait: Plait, workspace: Path, tmp_path: Path
) -> None:
    model = write_script(tmp_path, "read", READ_SCRIPT)
    c = crash(plait.db, workspace, model, "user_saved")
    (report,) = plait.json("runs", "recover", "--run", c.run_id, "--model", model)["recoveries"]
    assert report["run"]["status"] == "completed"
    assert [m["kind"] for m in plait.history(c.session_id)] == [
        "user",
        "assistant",
        "tool_result",
        "assistant",
    ]


def test_recover_skips_a_run_of_another_model(
    plait: Plait, workspace: Path, model: str, tmp_path: Path
) -> None:
    c = crash(plait.db, workspace, model, "user_saved")
    other = write_script(tmp_path, "other", {"version": 1, "model": "other", "assistant": []})
    before = snapshot(plait.db)
    (report,) = plait.json("runs", "recover", "--model", other)["recoveries"]
    assert report["run_id"] == c.run_id
    assert report["outcome"] == "skipped"
    assert "scripted:recovery" in report["detail"] and "scripted:other" in report["detail"]
    assert snapshot(plait.db) == before


def test_recover_leaves_a_live_run_alone_and_cancel_is_a_request(
    plait: Plait, workspace: Path, model: str
) -> None:
    """A run whose owner still holds its lease (another process working on it)."""
    c = crash(
        plait.db, workspace, model, "user_saved", clock=FixedClock(time.time()), lease_seconds=3600
    )
    assert plait.json("runs", "recover", "--model", model)["recoveries"] == []
    (report,) = plait.json("runs", "recover", "--run", c.run_id, "--model", model)["recoveries"]
    assert report["outcome"] == "skipped"
    assert plait.json("runs", "show", c.run_id)["lease"]["owner"] == "dead-worker"

    # the session is busy: a second send gets a clear error and writes nothing
    (session,) = plait.json("sessions", "list")["sessions"]
    assert session["active_run_id"] == c.run_id
    assert f"(run {c.run_id} active)" in plait.ok("sessions", "list").out
    before = snapshot(plait.db)
    busy = plait("send", c.session_id, "me too", "--model", model, "--json")
    assert busy.code == 2
    assert busy.json["error"]["code"] == "session_busy"
    assert c.run_id in busy.json["error"]["message"]
    assert snapshot(plait.db) == before

    r = plait.ok("runs", "cancel", c.run_id)
    first, hint = r.out.strip().splitlines()
    assert first == f"cancellation requested for run {c.run_id}; it stops at its next step"
    assert hint.startswith(f"run {c.run_id} is held by dead-worker until ")
    assert "'plait runs recover' takes the run over once the lease has expired" in hint
    assert hint.endswith(f"'plait runs cancel {c.run_id} --force' does it now")
    run = plait.json("runs", "show", c.run_id)
    assert run["status"] == "running"
    assert run["cancel_requested"] is True


# --- cancelling a finished run -----------------------------------------------------------------


@pytest.fixture
def completed(plait: Plait, workspace: Path, tmp_path: Path) -> tuple[str, str]:
    model = write_script(tmp_path, "read", READ_SCRIPT)
    sid = plait.new_session(workspace)
    return sid, plait.json("send", sid, "hi", "--model", model)["run_id"]


def test_cancel_a_finished_run_does_not_change_its_outcome(
    plait: Plait, completed: tuple[str, str]
) -> None:
    sid, run_id = completed
    before = plait.json("runs", "show", run_id)
    history = plait.history(sid)
    r = plait("runs", "cancel", run_id, "--json")
    assert r.code == 0
    after = plait.json("runs", "show", run_id)
    assert r.json["status"] == after["status"] == "completed"
    assert after["ended_at"] == before["ended_at"]
    assert after["error"] is None
    assert after["executions"] == before["executions"]
    assert plait.history(sid) == history


def test_cancel_a_finished_run_says_it_had_already_ended(
    plait: Plait, completed: tuple[str, str]
) -> None:
    _, run_id = completed
    out = plait.ok("runs", "cancel", run_id).out
    assert "already" in out and "completed" in out
    assert not out.startswith("cancelled run")


def test_cancel_a_finished_run_changes_nothing_stored(
    plait: Plait, completed: tuple[str, str]
) -> None:
    _, run_id = completed
    before = snapshot(plait.db)
    plait.ok("runs", "cancel", run_id)
    assert snapshot(plait.db) == before


def test_resume_without_a_model_changes_nothing(plait: Plait, crashed_in_write: Crashed) -> None:
    c = crashed_in_write
    _waits(plait("runs", "recover", "--model", c.model))
    plait.ok(
        "runs", "resolve", c.run_id, "--call", "c_write", "--status", "succeeded", "--note", "ok"
    )
    before = snapshot(plait.db)
    r = plait("runs", "resume", c.run_id)
    after = snapshot(plait.db)
    assert (r.code, after["runs"][0]["status"]) == (2, "awaiting_resolution")
    assert "no model chosen" in r.err
    assert after == before


def test_cancel_force_leaves_a_started_side_effect_unknown(
    plait: Plait, crashed_in_write: Crashed
) -> None:
    c = crashed_in_write  # the write happened; its result was never saved
    r = plait.ok("runs", "cancel", c.run_id, "--force")
    assert f"run {c.run_id} awaits resolution, not cancelled" in r.out
    run = plait.json("runs", "show", c.run_id)
    assert run["status"] == "awaiting_resolution"
    assert run["error"]["code"] == "unknown_effect"
    # no result claims the write was not executed
    assert [m["kind"] for m in plait.history(c.session_id)] == ["user", "assistant"]
    plait.ok(
        "runs", "resolve", c.run_id, "--call", "c_write", "--status", "succeeded", "--note", "ok"
    )
    r = plait("runs", "resume", c.run_id, "--model", c.model)
    assert plait.json("runs", "show", c.run_id)["status"] == "cancelled", (r.out, r.err)
    history = plait.history(c.session_id)
    assert [(m["kind"], m.get("status")) for m in history] == [
        ("user", None),
        ("assistant", None),
        ("tool_result", "succeeded"),
    ]
