"""Every command's happy path, in text and in ``--json``, against the documented shapes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.cli.conftest import (
    Plait,
    assert_contiguous,
    call,
    check_message,
    check_run,
    check_session,
    write_script,
)

TWO_CALLS: dict[str, Any] = {
    "version": 1,
    "model": "cli-test",
    "assistant": [
        {
            "text": "Let me look at the notes.",
            "tool_calls": [
                call("read_file", "c_read", path="notes.txt"),
                call("read_file", "c_missing", path="missing.txt"),
            ],
        },
        {"text": "The notes say hello.", "usage": {"input_tokens": 100, "output_tokens": 7}},
    ],
}


@pytest.fixture
def model(tmp_path: Path) -> str:
    return write_script(tmp_path, "two-calls", TWO_CALLS)


def test_sessions_new_and_list(plait: Plait, workspace: Path, tmp_path: Path) -> None:
    created = plait.json("sessions", "new", "--workspace", str(workspace), "--title", "first")
    check_session(created)
    assert created["workspace"] == str(workspace.resolve())
    assert created["title"] == "first"
    assert created["version"] == 0
    assert created["active_run_id"] is None
    assert created["fork_origin"] is None
    assert created["owner"] is None

    text = plait.ok("sessions", "new")  # no workspace: the current directory, as chat
    second = text.out.strip()
    assert second.startswith("ses_") and "\n" not in second
    assert text.err == ""

    listed = plait.json("sessions", "list")["sessions"]
    for s in listed:
        check_session(s)
    assert [s["session_id"] for s in listed] == [second, created["session_id"]]  # newest first
    assert listed[1] == created
    assert [
        s["session_id"] for s in plait.json("sessions", "list", "--limit", "1")["sessions"]
    ] == [second]

    lines = plait.ok("sessions", "list").out.splitlines()
    assert lines[0] == f"{second}  v0  {tmp_path.resolve()}"
    assert lines[1] == f"{created['session_id']}  'first'  v0  {workspace.resolve()}"


def test_sessions_list_on_an_empty_store(plait: Plait, tmp_path: Path) -> None:
    empty = f"jsonl:///{tmp_path / 'empty'}"
    (tmp_path / "empty").mkdir()
    assert plait.ok("sessions", "list", "--db", empty).out.strip() == "no sessions"
    assert plait.json("sessions", "list", "--db", empty)["sessions"] == []
    assert plait.json("runs", "list", "--db", empty)["runs"] == []
    assert plait.ok("runs", "list", "--db", empty).out.strip() == "no runs"


def test_relative_workspace_is_stored_absolute(plait: Plait, workspace: Path) -> None:
    sid = plait.new_session(Path("ws"))  # cwd is tmp_path
    assert plait.json("sessions", "list")["sessions"][0]["workspace"] == str(workspace.resolve())
    assert sid


def test_send_json_two_tool_calls(plait: Plait, workspace: Path, model: str) -> None:
    sid = plait.new_session(workspace)
    r = plait("send", sid, "What do the notes say?", "--model", model, "--json")
    assert r.code == 0, r.err
    run = r.json
    check_run(run, "messages", "output")
    assert run["session_id"] == sid
    assert run["status"] == "completed"
    assert run["error"] is None
    assert run["lease"] is None  # released when the run ended
    assert run["ended_at"] is not None
    assert run["cancel_requested"] is False
    assert run["model"] == "scripted:cli-test"
    assert run["usage"]["steps"] == 2
    assert run["usage"]["model_calls"] == 2
    assert run["usage"]["corrections"] == 0
    assert run["usage"]["tool_calls"] == 2
    assert run["usage"]["input_tokens"] > 100 and run["usage"]["output_tokens"] > 7
    assert run["budget"]["max_steps"] == 50  # the documented defaults
    assert run["budget"]["tool_output_cap_bytes"] == 32_000

    messages = run["messages"]
    assert_contiguous(messages)
    assert [m["kind"] for m in messages] == [
        "user",
        "assistant",
        "tool_result",
        "tool_result",
        "assistant",
    ]
    assert {m["run_id"] for m in messages} == {run["run_id"]}
    user, first, read, missing, answer = messages
    assert user["text"] == "What do the notes say?"
    assert first["text"] == "Let me look at the notes."
    assert first["model"] == "cli-test"
    assert first["step"] == 1
    assert first["tool_calls"] == [
        {"call_id": "c_read", "name": "read_file", "arguments": {"path": "notes.txt"}},
        {"call_id": "c_missing", "name": "read_file", "arguments": {"path": "missing.txt"}},
    ]
    assert first["usage"]["input_tokens"] > 0  # estimated: the turn gave none
    assert read["call_id"] == "c_read"
    assert read["tool_name"] == "read_file"
    assert read["status"] == "succeeded"
    assert read["content"].startswith("hello plait\nsecond line\n")
    assert read["artifact"] is None
    assert read["step"] == 1
    assert missing["call_id"] == "c_missing"
    assert missing["status"] == "failed"
    assert "missing.txt" in missing["content"] or "missing.txt" in (missing["reason"] or "")
    assert answer["text"] == "The notes say hello."
    assert answer["tool_calls"] == []
    assert answer["usage"] == {"input_tokens": 100, "output_tokens": 7}
    assert answer["step"] == 2

    session = plait.json("sessions", "list")["sessions"][0]
    assert session["version"] == 5  # the seq of its last message
    assert session["active_run_id"] is None


def test_send_text(plait: Plait, workspace: Path, model: str) -> None:
    sid = plait.new_session(workspace)
    r = plait("send", sid, "What do the notes say?", "--model", model)
    assert r.code == 0, r.err
    out = r.out
    assert "[1] user:\n    What do the notes say?" in out
    assert "[2] assistant (step 1):" in out
    assert '→ read_file({"path": "notes.txt"})  [c_read]' in out
    assert "[3] read_file [c_read] succeeded" in out
    assert "[4] read_file [c_missing] failed" in out
    assert "[5] assistant (step 2):\n    The notes say hello." in out
    assert "status      completed" in out
    assert "2 steps, 2 model calls (0 corrections), 2 tool calls" in out
    assert r.err == ""


def test_history_json_and_text(plait: Plait, workspace: Path, model: str) -> None:
    sid = plait.new_session(workspace)
    assert plait.json("history", sid) == {"session_id": sid, "messages": []}
    assert plait.ok("history", sid).out.strip() == "no messages yet"

    sent = plait.json("send", sid, "hi", "--model", model)
    history = plait.json("history", sid)
    assert set(history) == {"session_id", "messages"}
    assert history["session_id"] == sid
    for m in history["messages"]:
        check_message(m)
    assert history["messages"] == sent["messages"]  # what the run added is what is stored

    text = plait.ok("history", sid).out
    assert text.index("[1] user:") < text.index("[3] read_file [c_read] succeeded")
    assert "The notes say hello." in text


def test_runs_show_and_list(plait: Plait, workspace: Path, model: str) -> None:
    sid = plait.new_session(workspace)
    run_id = plait.json("send", sid, "hi", "--model", model)["run_id"]

    shown = plait.json("runs", "show", run_id)
    check_run(shown, "executions", "approvals")
    assert shown["run_id"] == run_id and shown["status"] == "completed"
    executions = {e["call_id"]: e for e in shown["executions"]}
    assert set(executions) == {"c_read", "c_missing"}
    for e in executions.values():
        assert e["tool_name"] == "read_file"
        assert e["effect"] == "read_only"
        assert e["state"] == "settled"
        assert e["args_digest"] and e["idempotency_key"]
        assert e["settled_at"] is not None
    assert executions["c_read"]["result_status"] == "succeeded"
    assert executions["c_missing"]["result_status"] == "failed"
    assert executions["c_read"]["idempotency_key"] != executions["c_missing"]["idempotency_key"]

    text = plait.ok("runs", "show", run_id).out
    assert text.startswith(f"run {run_id}  session {sid}")
    assert "call c_read  read_file  read_only  settled  → succeeded" in text
    assert "call c_missing  read_file  read_only  settled  → failed" in text

    other = plait.new_session(workspace)
    run2 = plait.json("send", other, "hi", "--model", model)["run_id"]
    listed = plait.json("runs", "list")["runs"]
    for r in listed:
        check_run(r)
    assert [r["run_id"] for r in listed] == [run2, run_id]  # newest first
    assert [r["run_id"] for r in plait.json("runs", "list", "--session", sid)["runs"]] == [run_id]
    lines = plait.ok("runs", "list").out.splitlines()
    assert lines == [f"{run2}  {other}  completed", f"{run_id}  {sid}  completed"]


@pytest.mark.slow
@pytest.mark.parametrize("where", ["before", "after"])
def test_json_flag_before_or_after_the_subcommand(
    plait: Plait, workspace: Path, model: str, where: str
) -> None:
    def j(*argv: str) -> Any:
        full = ["--json", *argv] if where == "before" else [*argv, "--json"]
        r = plait(*full)
        assert r.code == 0, r.err
        return r.json

    sid = j("sessions", "new", "--workspace", str(workspace))["session_id"]
    assert j("sessions", "list")["sessions"][0]["session_id"] == sid
    run = j("send", sid, "hi", "--model", model)
    assert run["status"] == "completed"
    assert len(j("history", sid)["messages"]) == 5
    assert j("runs", "show", run["run_id"])["executions"]
    assert j("runs", "list")["runs"][0]["run_id"] == run["run_id"]
    assert j("runs", "recover", "--model", model)["recoveries"] == []
    assert j("runs", "cancel", run["run_id"])["status"] == "completed"


def test_db_flag_before_the_subcommand(plait: Plait, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'top.db'}"
    sid = plait.raw("--db", url, "--json", "sessions", "new").json["session_id"]
    assert (
        plait.raw("--db", url, "--json", "sessions", "list").json["sessions"][0]["session_id"]
        == sid
    )
    assert (
        plait.raw("sessions", "list", "--db", url, "--json").json["sessions"][0]["session_id"]
        == sid
    )
    assert (tmp_path / "top.db").is_file()


def test_runs_recover_with_nothing_to_do(plait: Plait, model: str) -> None:
    plait.new_session()
    assert plait.ok("runs", "recover", "--model", model).out.strip() == "no run needs recovery"
    assert plait.json("runs", "recover", "--model", model)["recoveries"] == []


@pytest.mark.slow
def test_multi_send_conversation_across_processes(
    plait: Plait, workspace: Path, tmp_path: Path
) -> None:
    """Each ``main()`` call builds a new scripted model (as a new process would); the script
    continues from the number of assistant messages in the session."""
    model = write_script(
        tmp_path,
        "conversation",
        {
            "version": 1,
            "model": "conv",
            "assistant": [
                # send 1: steps 0 and 1
                {"text": "Looking.", "tool_calls": [call("list_dir", "c_ls", path=".")]},
                {"text": "There is a notes file and a src dir."},
                # send 2: a malformed turn (corrected), then a write, then the answer
                {"malformed": "unknown_tool"},
                {
                    "text": "Writing it.",
                    "tool_calls": [call("write_file", "c_write", path="out.txt", content="42\n")],
                },
                {"text": "Wrote out.txt."},
                # send 3
                {"text": "You're welcome."},
            ],
        },
    )
    sid = plait.new_session(workspace)

    first = plait.json("send", sid, "What is here?", "--model", model)
    assert first["status"] == "completed"
    assert [m["text"] for m in first["messages"] if m["kind"] == "assistant"] == [
        "Looking.",
        "There is a notes file and a src dir.",
    ]
    listing = first["messages"][2]["content"]
    assert "notes.txt" in listing and "src/" in listing

    second = plait.json("send", sid, "Write 42 to out.txt", "--model", model)
    assert second["status"] == "completed"
    assert second["usage"]["corrections"] == 1
    assert second["usage"]["model_calls"] == 3
    assert_contiguous(second["messages"], first=5)
    assert [(m["kind"], m.get("text")) for m in second["messages"]] == [
        ("user", "Write 42 to out.txt"),
        ("assistant", "Writing it."),
        ("tool_result", None),
        ("assistant", "Wrote out.txt."),
    ]
    assert second["messages"][2]["status"] == "succeeded"
    assert (workspace / "out.txt").read_text(encoding="utf-8") == "42\n"

    third = plait.json("send", sid, "Thanks!", "--model", model)
    assert [m.get("text") for m in third["messages"]] == ["Thanks!", "You're welcome."]

    history = plait.history(sid)
    assert_contiguous(history)
    assert len(history) == 4 + 4 + 2
    assert [m["run_id"] for m in history] == (
        [first["run_id"]] * 4 + [second["run_id"]] * 4 + [third["run_id"]] * 2
    )
    runs = plait.json("runs", "list", "--session", sid)["runs"]
    assert [r["status"] for r in runs] == ["completed"] * 3

    # the script is used up: a fourth send fails the run (exit 1) with a clear error
    fourth = plait("send", sid, "More?", "--model", model, "--json")
    assert fourth.code == 1
    assert fourth.json["status"] == "failed"
    assert "script exhausted" in fourth.json["error"]["message"]


def test_edit_file_changes_the_workspace(plait: Plait, workspace: Path, tmp_path: Path) -> None:
    model = write_script(
        tmp_path,
        "edit",
        {
            "version": 1,
            "assistant": [
                {
                    "tool_calls": [
                        call(
                            "edit_file",
                            "c_edit",
                            path="src/app.py",
                            old_string="return 'hi'",
                            new_string="return 'hello'",
                        )
                    ]
                },
                {"text": "Edited."},
            ],
        },
    )
    sid = plait.new_session(workspace)
    run = plait.json("send", sid, "say hello", "--model", model)
    assert run["messages"][2]["status"] == "succeeded"
    assert "return 'hello'" in (workspace / "src" / "app.py").read_text(encoding="utf-8")
    (execution,) = plait.json("runs", "show", run["run_id"])["executions"]
    assert execution["effect"] == "side_effect"
    assert execution["started_at"] is not None
    assert execution["result_status"] == "succeeded"


def test_send_budget_flags_are_recorded(plait: Plait, workspace: Path, model: str) -> None:
    sid = plait.new_session(workspace)
    run = plait.json(
        "send",
        sid,
        "hi",
        "--model",
        model,
        "--max-steps",
        "7",
        "--deadline",
        "30",
        "--max-model-calls",
        "9",
        "--max-tokens",
        "100000",
        "--tool-timeout",
        "5",
        "--output-cap",
        "4096",
    )
    assert run["budget"] == {
        "max_steps": 7,
        "deadline_seconds": 30.0,
        "max_model_calls": 9,
        "max_total_tokens": 100_000,
        "max_cost_usd": None,
        "max_corrections": 2,
        "tool_timeout_seconds": 5.0,
        "tool_output_cap_bytes": 4096,
    }
    assert plait.json("runs", "show", run["run_id"])["budget"] == run["budget"]


def test_non_ascii_text_round_trips(plait: Plait, workspace: Path, tmp_path: Path) -> None:
    model = write_script(
        tmp_path, "unicode", {"version": 1, "assistant": [{"text": "Grüße, naïve café ✓ 日本"}]}
    )
    sid = plait.new_session(workspace, title="tëst")
    r = plait("send", sid, "héllo → wörld", "--model", model, "--json")
    assert r.code == 0
    assert "héllo → wörld" in r.out and "日本" in r.out  # printed as is, not \u-escaped
    assert [m["text"] for m in plait.history(sid)] == ["héllo → wörld", "Grüße, naïve café ✓ 日本"]
    assert plait.json("sessions", "list")["sessions"][0]["title"] == "tëst"
    assert "Grüße, naïve café ✓ 日本" in plait.ok("history", sid).out
