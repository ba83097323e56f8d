"""``send`` takes its message from TEXT, ``--file`` or stdin, shows the run live on a
terminal, and streams JSON lines with ``--events``."""

from __future__ import annotations

import io
import json
import os
import pty
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.cli.conftest import Plait, call, check_message, check_run, child_env, write_script

SCRIPT: dict[str, Any] = {
    "version": 1,
    "model": "send-input",
    "assistant": [
        {"text": "Reading.", "tool_calls": [call("read_file", "c1", path="notes.txt")]},
        {"text": "Done."},
    ],
}


@pytest.fixture
def model(tmp_path: Path) -> str:
    return write_script(tmp_path, "send", SCRIPT)


def _stdin(monkeypatch: pytest.MonkeyPatch, data: bytes) -> None:
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data), encoding="utf-8"))


def _user_text(plait: Plait, sid: str) -> str:
    text = plait.history(sid)[0]["text"]
    assert isinstance(text, str)
    return text


@pytest.mark.parametrize("argv", [["-"], []], ids=["dash", "omitted"])
def test_message_from_stdin(
    plait: Plait, workspace: Path, model: str, monkeypatch: pytest.MonkeyPatch, argv: list[str]
) -> None:
    sid = plait.new_session(workspace)
    _stdin(monkeypatch, "Why?\nSecond line — ü\n".encode())
    run = plait.json("send", sid, *argv, "--model", model)
    assert run["status"] == "completed"
    assert _user_text(plait, sid) == "Why?\nSecond line — ü\n"


def test_message_from_a_file(plait: Plait, workspace: Path, model: str, tmp_path: Path) -> None:
    sid = plait.new_session(workspace)
    (tmp_path / "msg.md").write_text("From a file.\n", encoding="utf-8")
    plait.json("send", sid, "--file", str(tmp_path / "msg.md"), "--model", model)
    assert _user_text(plait, sid) == "From a file.\n"


@pytest.mark.slow
def test_a_ten_megabyte_message(
    plait: Plait, workspace: Path, model: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    big = ("0123456789abcdef" * 64 + "\n") * 10_240  # 10.5 MB
    (tmp_path / "big.txt").write_text(big, encoding="utf-8")
    sid = plait.new_session(workspace)
    r = plait("send", sid, "--file", str(tmp_path / "big.txt"), "--model", model)
    # refused before it is stored: it alone is far over the model's window (issue 26)
    assert r.code == 2 and "cannot fit model" in r.err, (r.out[:300], r.err)
    assert plait.history(sid) == []
    other = plait.new_session(workspace)
    _stdin(monkeypatch, big.encode())
    r = plait("send", other, "--model", model)
    assert r.code == 2 and "cannot fit model" in r.err
    assert plait.history(other) == []


def test_events_stream_json_lines(plait: Plait, workspace: Path, model: str) -> None:
    sid = plait.new_session(workspace)
    r = plait("send", sid, "hi", "--model", model, "--events")
    assert r.code == 0, r.err
    events = [json.loads(line) for line in r.out.splitlines()]
    assert [e["event"] for e in events] == ["message"] * 4 + ["run"]
    for e in events[:-1]:
        check_message({k: v for k, v in e.items() if k != "event"})
    run = {k: v for k, v in events[-1].items() if k != "event"}
    check_run(run)
    assert run["status"] == "completed"
    assert [e["kind"] for e in events[:-1]] == ["user", "assistant", "tool_result", "assistant"]


def test_events_report_an_error_as_a_line(plait: Plait, model: str) -> None:
    plait.new_session()
    r = plait("send", "ses_nope", "hi", "--model", model, "--events")
    assert r.code == 2
    (line,) = r.out.splitlines()
    assert json.loads(line)["event"] == "error"
    assert json.loads(line)["error"]["code"] == "session_not_found"


def test_not_a_terminal_prints_the_documented_text(
    plait: Plait, workspace: Path, model: str
) -> None:
    sid = plait.new_session(workspace)
    out = plait.ok("send", sid, "hi", "--model", model).out
    assert out.startswith("[1] user:\n    hi\n[2] assistant (step 1):\n")
    assert "\x1b[" not in out  # no spinner, no colours
    assert "  usage       2 steps, 2 model calls (0 corrections), 1 tool call," in out


def _on_a_terminal(argv: list[str], cwd: Path) -> tuple[int, str]:
    """Run plait with stdout and stderr on a pseudo-terminal; return (status, output)."""
    main_fd, child_fd = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "plait", *argv],
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        stdout=child_fd,
        stderr=child_fd,
        env=child_env(COLUMNS="120", TERM="xterm"),
    )
    os.close(child_fd)
    chunks: list[bytes] = []
    while True:
        try:
            chunk = os.read(main_fd, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(main_fd)
    text = b"".join(chunks).decode("utf-8", "replace")
    return proc.wait(timeout=60), re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", text)


@pytest.mark.slow
def test_a_terminal_sees_the_run_as_it_happens(
    plait: Plait, workspace: Path, model: str, tmp_path: Path
) -> None:
    sid = plait.new_session(workspace)
    code, out = _on_a_terminal(["send", sid, "hi", "--model", model, "--db", plait.db], tmp_path)
    assert code == 0, out
    reading = out.index("Reading.")
    called = out.index('→ read_file {"path": "notes.txt"}')
    result = out.index("✓ read_file succeeded")
    done = out.index("Done.")
    assert reading < called < result < done < out.index("status      completed")
    assert "[1] user" not in out  # the live view replaces the transcript
