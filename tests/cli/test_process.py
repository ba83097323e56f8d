"""Real processes: the installed ``plait`` console script, ``python -m``, ``--help``
everywhere, ``plait chat`` driven through a pipe, and ``plait demo``."""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from plait.entrypoints.cli.main import build_parser
from tests.cli.conftest import (
    Plait,
    call,
    check_message,
    check_run,
    child_env,
    run_plait,
    snapshot,
    sqlite_url,
    write_script,
)

CONSOLE_SCRIPT = Path(sys.executable).parent / "plait"

CHAT_SCRIPT = {
    "version": 1,
    "model": "chatty",
    "assistant": [
        {"text": "Reading.", "tool_calls": [call("read_file", "c1", path="notes.txt")]},
        {"text": "First answer."},
        {"text": "Second answer."},
        {"text": "Third answer."},
    ],
}


def _console(
    *argv: str, cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """The ``plait`` executable the package installs (``[project.scripts]``)."""
    assert CONSOLE_SCRIPT.is_file(), f"console script not installed at {CONSOLE_SCRIPT}"
    return subprocess.run(
        [str(CONSOLE_SCRIPT), *argv],
        cwd=cwd,
        capture_output=True,
        text=True,
        env=env if env is not None else child_env(),
        timeout=60,
        check=False,
    )


@pytest.mark.slow
def test_console_script_end_to_end(tmp_path: Path, workspace: Path) -> None:
    model = write_script(tmp_path, "m", CHAT_SCRIPT)
    new = _console("sessions", "new", "--workspace", "ws", "--json", cwd=tmp_path)
    assert new.returncode == 0, new.stderr
    sid = json.loads(new.stdout)["session_id"]
    # the default store: in the user's data directory, not under the cwd
    assert (tmp_path / "xdg" / "plait" / "plait.db").is_file()
    assert not (tmp_path / ".plait").exists()

    sent = _console("--json", "send", sid, "read the notes", "--model", model, cwd=tmp_path)
    assert sent.returncode == 0, sent.stderr
    run = json.loads(sent.stdout)
    assert run["status"] == "completed"
    assert [m["kind"] for m in run["messages"]] == ["user", "assistant", "tool_result", "assistant"]

    history = _console("history", sid, "--json", cwd=tmp_path)
    assert json.loads(history.stdout)["messages"] == run["messages"]

    missing = _console("--json", "history", "ses_nope", cwd=tmp_path)
    assert missing.returncode == 2
    assert json.loads(missing.stdout)["error"]["code"] == "session_not_found"
    assert missing.stderr == "plait: error: session 'ses_nope' not found\n"


@pytest.mark.slow
def test_python_m_exit_statuses(tmp_path: Path, workspace: Path) -> None:
    db = sqlite_url(tmp_path / "p.db")
    model = write_script(
        tmp_path,
        "loop",
        {
            "version": 1,
            "assistant": [{"tool_calls": [call("list_dir", f"c{i}", path=".")]} for i in range(3)],
        },
    )
    new = run_plait("--db", db, "sessions", "new", "--workspace", str(workspace), cwd=tmp_path)
    assert new.returncode == 0, new.stderr
    sid = new.stdout.strip()
    exhausted = run_plait(
        "--db", db, "send", sid, "go", "--model", model, "--max-steps", "1", cwd=tmp_path
    )
    assert exhausted.returncode == 1, exhausted.stderr
    assert "budget_exhausted" in exhausted.stdout
    fresh = run_plait("--db", db, "sessions", "new", cwd=tmp_path).stdout.strip()
    bad = run_plait("--db", db, "send", fresh, "go", cwd=tmp_path)  # it never ran: no model
    assert bad.returncode == 2
    assert "no model chosen" in bad.stderr


@pytest.mark.slow
def test_env_vars_reach_a_real_process(tmp_path: Path, workspace: Path) -> None:
    model = write_script(tmp_path, "m", CHAT_SCRIPT)
    env = child_env(PLAIT_DB=sqlite_url(tmp_path / "env.db"), PLAIT_MODEL=model)
    new = run_plait("sessions", "new", "--workspace", "ws", cwd=tmp_path, env=env)
    sid = new.stdout.strip()
    sent = run_plait("send", sid, "hi", "--json", cwd=tmp_path, env=env)
    assert sent.returncode == 0, sent.stderr
    assert json.loads(sent.stdout)["model"] == "scripted:chatty"
    assert (tmp_path / "env.db").is_file()
    assert not (tmp_path / ".plait").exists()


# --- help --------------------------------------------------------------------------------------


def _commands() -> list[list[str]]:
    """Every command path of the parser: [], ["sessions"], ["sessions", "new"], ..."""

    def walk(parser: argparse.ArgumentParser, prefix: list[str]) -> list[list[str]]:
        found = [prefix]
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    found.extend(walk(sub, [*prefix, name]))
        return found

    return walk(build_parser(), [])


def test_the_help_covers_every_documented_command() -> None:
    assert sorted(" ".join(c) for c in _commands()) == sorted(
        [
            "",
            "sessions",
            "sessions new",
            "sessions list",
            "sessions fork",
            "sessions show",
            "sessions tree",
            "send",
            "history",
            "compact",
            "context",
            "eval",
            "eval compaction",
            "runs",
            "runs show",
            "runs list",
            "runs cancel",
            "runs recover",
            "runs resolve",
            "runs resume",
            "artifacts",
            "artifacts show",
            "chat",
            "init",
            "schema",
            "demo",
            "approvals",
            "approvals list",
            "approvals approve",
            "approvals deny",
            "policy",
            "policy check",
            "policy explain",
            "db",
            "db upgrade",
            "keys",
            "keys create",
            "serve",
            "worker",
            "models",
            "models list",
            "models check",
            "retention",
            "retention expire",
            "retention restore",
            "webhooks",
            "webhooks add",
            "webhooks list",
            "webhooks deliveries",
            "webhooks remove",
            "webhooks resume",
            "tools",
            "tools list",
            "mcp",
            "mcp check",
        ]
    )


@pytest.mark.parametrize("command", _commands(), ids=lambda c: " ".join(c) or "plait")
def test_help_exits_0(plait: Plait, command: list[str]) -> None:
    with pytest.raises(SystemExit) as info:
        plait.raw(*command, "--help")
    assert info.value.code == 0
    out, _ = plait.captured()
    assert out.startswith("usage: plait")


@pytest.mark.slow
def test_help_in_a_real_process(tmp_path: Path) -> None:
    top = _console("--help", cwd=tmp_path)
    assert top.returncode == 0
    for name in ("sessions", "send", "history", "runs", "chat", "demo"):
        assert name in top.stdout
    sub = run_plait("runs", "resolve", "--help", cwd=tmp_path)
    assert sub.returncode == 0
    assert "--call" in sub.stdout and "--status" in sub.stdout and "--note" in sub.stdout
    assert list(tmp_path.iterdir()) == []  # --help opens no store


@pytest.mark.slow
def test_a_process_started_with_ctrl_c_ignored_keeps_ignoring_it(tmp_path: Path) -> None:
    """A background job of a script starts with SIGINT ignored: plait's guard for Ctrl-C
    while its modules load must not make it interruptible meanwhile."""
    for delay in (0.05, 0.15, 0.3):
        proc = subprocess.Popen(
            [str(CONSOLE_SCRIPT), "--help"],
            cwd=tmp_path,
            env=child_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
        )
        time.sleep(delay)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
        assert proc.returncode == 0, (delay, err.decode())
        assert b"usage:" in out


# --- chat --------------------------------------------------------------------------------------


@pytest.mark.slow
def test_chat_through_a_pipe(tmp_path: Path, workspace: Path) -> None:
    model = write_script(tmp_path, "chat", CHAT_SCRIPT)
    db = sqlite_url(tmp_path / "chat.db")
    proc = run_plait(
        "chat",
        "--workspace",
        "ws",
        "--model",
        model,
        "--db",
        db,
        cwd=tmp_path,
        input="read the notes\n\nand again\n",  # the blank line is skipped
    )
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr

    stored = snapshot(db)
    (session,) = stored["sessions"]
    assert session["workspace"] == str(workspace)
    assert session["active_run_id"] is None
    sid = session["session_id"]
    assert sid in proc.stdout  # the banner names the session
    messages = stored["messages"][sid]
    assert [(m["kind"], m.get("text")) for m in messages] == [
        ("user", "read the notes"),
        ("assistant", "Reading."),
        ("tool_result", None),
        ("assistant", "First answer."),
        ("user", "and again"),
        ("assistant", "Second answer."),
    ]
    assert messages[2]["status"] == "succeeded"
    assert [r["status"] for r in stored["runs"]] == ["completed", "completed"]

    # a second chat process continues the same session (and the script) with --session
    again = run_plait(
        "chat", "--session", sid, "--model", model, "--db", db, cwd=tmp_path, input="/exit\n"
    )
    assert again.returncode == 0, again.stderr
    third = run_plait(
        "chat", "--session", sid, "--model", model, "--db", db, cwd=tmp_path, input="more\n"
    )
    assert third.returncode == 0, third.stderr
    texts = [m.get("text") for m in snapshot(db)["messages"][sid]]
    assert texts[-2:] == ["more", "Third answer."]


@pytest.mark.slow
def test_chat_json_lines_through_a_pipe(tmp_path: Path, workspace: Path) -> None:
    """``chat --json``: one JSON event per line (session, then each saved message, then the
    run), in the documented message and run shapes."""
    model = write_script(tmp_path, "chat", CHAT_SCRIPT)
    db = sqlite_url(tmp_path / "chat.db")
    proc = run_plait(
        "chat",
        "--json",
        "--workspace",
        "ws",
        "--model",
        model,
        "--db",
        db,
        cwd=tmp_path,
        input="read the notes\n\nand again\n",
    )
    assert proc.returncode == 0, proc.stderr
    events = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [e["event"] for e in events] == ["session"] + ["message"] * 4 + ["run"] + [
        "message"
    ] * 2 + ["run"]
    sid = events[0]["session_id"]
    messages = [
        {k: v for k, v in e.items() if k != "event"} for e in events if e["event"] == "message"
    ]
    for m in messages:
        check_message(m)
    runs = [{k: v for k, v in e.items() if k != "event"} for e in events if e["event"] == "run"]
    for r in runs:
        check_run(r)
        assert r["status"] == "completed" and r["session_id"] == sid
    assert snapshot(db)["messages"][sid] == messages


@pytest.mark.slow
def test_chat_errors(tmp_path: Path, workspace: Path) -> None:
    model = write_script(tmp_path, "chat", CHAT_SCRIPT)
    db = sqlite_url(tmp_path / "chat.db")
    unknown = run_plait("chat", "--session", "ses_nope", "--model", model, "--db", db, cwd=tmp_path)
    assert unknown.returncode == 2
    assert unknown.stderr == "plait: error: session 'ses_nope' not found\n"
    no_ws = run_plait("chat", "--workspace", "nope", "--model", model, "--db", db, cwd=tmp_path)
    assert no_ws.returncode == 2
    assert "workspace 'nope' is not an existing directory" in no_ws.stderr
    assert snapshot(db)["sessions"] == []


@pytest.mark.slow
def test_chat_reports_a_failed_run_and_goes_on(tmp_path: Path, workspace: Path) -> None:
    short = write_script(tmp_path, "short", {"version": 1, "assistant": [{"text": "Only one."}]})
    db = sqlite_url(tmp_path / "chat.db")
    proc = run_plait(
        "chat", "--workspace", "ws", "--model", short, "--db", db, cwd=tmp_path, input="a\nb\n"
    )
    assert proc.returncode == 0, proc.stderr
    assert "run failed" in proc.stdout and "script exhausted" in proc.stdout
    stored = snapshot(db)
    assert sorted(r["status"] for r in stored["runs"]) == ["completed", "failed"]
    (sid,) = stored["messages"]
    assert [m.get("text") for m in stored["messages"][sid] if m["kind"] == "user"] == ["a", "b"]


@pytest.mark.slow
def test_chat_does_not_tick_a_failed_call(tmp_path: Path, workspace: Path) -> None:
    model = write_script(
        tmp_path,
        "miss",
        {
            "version": 1,
            "assistant": [
                {"tool_calls": [call("read_file", "c1", path="missing.txt")]},
                {"text": "Not there."},
            ],
        },
    )
    proc = run_plait(
        "chat",
        "--workspace",
        "ws",
        "--model",
        model,
        "--db",
        "memory://",
        cwd=tmp_path,
        input="x\n",
    )
    assert proc.returncode == 0, proc.stderr
    assert "read_file failed" in proc.stdout
    assert "✓ read_file failed" not in proc.stdout


def test_chat_without_a_model_changes_nothing(plait: Plait, workspace: Path) -> None:
    r = plait("chat", "--workspace", str(workspace))
    assert r.code == 2
    assert "no model chosen" in r.err
    assert snapshot(plait.db)["sessions"] == []


# --- demo --------------------------------------------------------------------------------------


@pytest.mark.slow
def test_demo_in_a_real_process(tmp_path: Path) -> None:
    demo_tmp = tmp_path / "t"
    demo_tmp.mkdir()
    env = child_env(TMPDIR=str(demo_tmp))
    proc = run_plait("demo", "--json", cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr
    d = json.loads(proc.stdout)
    assert d["tests_before"]["passed"] is False and d["tests_after"]["passed"] is True
    assert Path(d["workspace"]).is_relative_to(demo_tmp)
    assert snapshot(d["store"])["sessions"][0]["session_id"] == d["session_id"]

    clean = _console("demo", "--clean", cwd=tmp_path, env=env)
    assert clean.returncode == 0, clean.stderr
    assert "tests after: pass" in clean.stdout
    assert len(list(demo_tmp.iterdir())) == 1  # only the first, unclean demo's directory


@pytest.mark.slow
def test_torn_jsonl_line_is_reported_and_dropped(tmp_path: Path) -> None:
    """(In a real process: pytest turns the StoreWarning into an error in-process.)"""
    url = f"jsonl:///{tmp_path / 'j'}"
    sid = run_plait("sessions", "new", "--db", url, cwd=tmp_path).stdout.strip()
    path = tmp_path / "j" / "sessions" / f"{sid}.jsonl"
    with path.open("a", encoding="utf-8") as f:
        f.write('{"torn')
    proc = run_plait("history", sid, "--db", url, "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == {"session_id": sid, "messages": []}
    assert "torn last line" in proc.stderr
