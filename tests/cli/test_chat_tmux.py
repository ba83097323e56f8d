"""``plait chat`` on a real terminal (tmux): an approval is asked inline and the run
continues (approve for a time, deny with a reason); Ctrl-C during a side-effecting call
says the run's true state, asks what happened and continues; Ctrl-C at the idle prompt
leaves with status 130. Each test has its own tmux server (``-L``)."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from plait.entrypoints.cli.main import main
from tests.cli.conftest import call, write_script
from tests.sandbox.conftest import bwrap  # noqa: F401 (a fixture)

pytestmark = pytest.mark.slow

if shutil.which("tmux") is None:
    if os.environ.get("CI") == "true":
        pytest.fail("CI=true but tmux is not installed", pytrace=False)
    pytest.skip("tmux is not installed (.ci/run installs it)", allow_module_level=True)


class Term:
    """One tmux server running one command in a 160x50 window."""

    def __init__(self, argv: list[str], cwd: Path) -> None:
        self.socket = f"plait-test-{uuid.uuid4().hex[:12]}"
        shell = " ".join(_quote(a) for a in argv) + "; echo EXIT=$?; sleep 600"
        self.tmux("new-session", "-d", "-s", "t", "-x", "160", "-y", "50", "-c", str(cwd), shell)

    def tmux(self, *args: str) -> str:
        done = subprocess.run(
            ["tmux", "-L", self.socket, *args], capture_output=True, text=True, check=True
        )
        return done.stdout

    def screen(self) -> str:
        return self.tmux("capture-pane", "-p", "-J", "-S", "-200", "-t", "t")

    def wait_for(self, text: str, after: int = 0) -> str:
        """The screen once ``text`` shows (at or after character ``after``)."""
        deadline = time.monotonic() + 30
        while True:
            screen = self.screen()
            if text in screen[after:]:
                return screen
            assert time.monotonic() < deadline, f"{text!r} never showed:\n{screen}"
            time.sleep(0.1)

    def type(self, text: str) -> None:
        self.tmux("send-keys", "-t", "t", "-l", text)
        self.tmux("send-keys", "-t", "t", "Enter")

    def interrupt(self) -> None:
        self.tmux("send-keys", "-t", "t", "C-c")

    def close(self) -> None:
        subprocess.run(["tmux", "-L", self.socket, "kill-server"], capture_output=True)


def _quote(arg: str) -> str:
    return "'" + arg.replace("'", "'\\''") + "'"


@pytest.fixture
def term(tmp_path: Path) -> Iterator[Any]:
    made: list[Term] = []

    def start(*argv: str) -> Term:
        t = Term([sys.executable, "-m", "plait", *argv], tmp_path)
        made.append(t)
        return t

    yield start
    for t in made:
        t.close()


def _chat(tmp_path: Path, db: str, script: dict[str, Any], *extra: str) -> list[str]:
    ws = tmp_path / "ws"
    ws.mkdir(exist_ok=True)
    model = write_script(tmp_path, "chat", script)
    return ["chat", "--db", db, "--model", model, "--workspace", str(ws), *extra]


def _history(db: str, capsys: pytest.CaptureFixture[str]) -> list[dict[str, Any]]:
    capsys.readouterr()
    assert main(["sessions", "list", "--db", db, "--json"]) == 0
    (session,) = json.loads(capsys.readouterr().out)["sessions"]
    assert main(["history", session["session_id"], "--db", db, "--json"]) == 0
    messages: list[dict[str, Any]] = json.loads(capsys.readouterr().out)["messages"]
    return messages


GREET: dict[str, Any] = {
    "version": 1,
    "model": "chat-test",
    "assistant": [
        {"text": "I will greet", "tool_calls": [call("run_command", "c_echo", command="echo hi")]},
        {"text": "all done here"},
    ],
}


@pytest.mark.usefixtures("bwrap")
def test_chat_asks_an_approval_inline_and_the_run_continues(
    term: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = f"sqlite:///{tmp_path / 'chat.db'}"
    t = term(*_chat(tmp_path, db, GREET))
    t.wait_for("you> ")
    t.type("please greet")
    t.wait_for("approve? [a]pprove, approve for a [t]ime, [d]eny >")
    screen = t.screen()
    assert '"command": "echo hi"' in screen  # the exact arguments
    assert "plait approvals approve" not in screen  # nothing to run elsewhere
    t.type("t")
    t.wait_for("for how long")
    t.type("90s")
    t.wait_for("all done here")
    t.wait_for("you> ", after=t.screen().index("all done here"))
    t.interrupt()
    t.wait_for("EXIT=130")
    kinds = [(m["kind"], m.get("status")) for m in _history(db, capsys)]
    assert kinds == [
        ("user", None), ("assistant", None), ("tool_result", "succeeded"), ("assistant", None),
    ]  # fmt: skip


def test_chat_denies_inline_and_the_model_reads_the_reason(
    term: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = f"sqlite:///{tmp_path / 'chat.db'}"
    t = term(*_chat(tmp_path, db, GREET))
    t.wait_for("you> ")
    t.type("please greet")
    t.wait_for("[d]eny >")
    t.type("d")
    t.wait_for("why (the model reads it)?")
    t.type("not on a friday")
    t.wait_for("all done here")
    t.type("/exit")
    t.wait_for("EXIT=0")
    result = _history(db, capsys)[2]
    assert result["status"] == "denied" and "not on a friday" in result["reason"]


@pytest.mark.usefixtures("bwrap")
def test_ctrl_c_during_a_side_effect_asks_what_happened_and_continues(
    term: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    policy = tmp_path / "allow.toml"
    policy.write_text(
        'version = 1\n[[rules]]\nname = "sleepy"\ntools = ["run_command"]\n'
        'commands = ["sleep *"]\naction = "allow"\n',
        encoding="utf-8",
    )
    script = {
        "version": 1,
        "model": "chat-test",
        "assistant": [
            {
                "text": "sleeping",
                "tool_calls": [call("run_command", "c_sleep", command="sleep 60")],
            },
            {"text": "noted what happened"},
        ],
    }
    db = f"sqlite:///{tmp_path / 'chat.db'}"
    t = term(*_chat(tmp_path, db, script, "--policy", str(policy)))
    t.wait_for("you> ")
    t.type("sleep a while")
    t.wait_for("→ run_command")
    time.sleep(0.5)  # let the command start (not a timing assertion)
    t.interrupt()
    screen = t.wait_for("what happened? [s]ucceeded, [f]ailed >")
    assert "run cancelled\n" not in screen
    assert "is cancelled" in screen  # the run's true state, read back from the store
    assert '"command": "sleep 60"' in screen
    t.type("f")
    t.wait_for("what did you check")
    t.type("the sleep never finished")
    t.wait_for("noted what happened")
    t.type("/exit")
    t.wait_for("EXIT=0")
    history = _history(db, capsys)
    assert history[2]["status"] == "unknown"
    assert history[3]["kind"] == "user"
    assert "c_sleep run_command failed: the sleep never finished" in history[3]["text"]
    assert history[4]["text"] == "noted what happened"


_IN_RUN = re.compile(r"plait/entrypoints/cli/__init__\.py\", line \d+, in run\b")

# What the installed console script does, once Python itself has started (it says so on
# stderr): a Ctrl-C during Python's own start-up (site, runpy) is Python's to report.
_CONSOLE = (
    "import sys; sys.stderr.write('started\\n'); sys.stderr.flush(); sys.argv[0] = 'plait'; "
    "from plait.entrypoints.cli import run; run()"
)


def test_ctrl_c_in_the_first_moments_leaves_with_130_and_no_traceback(tmp_path: Path) -> None:
    """SIGINT at several points of start-up (importing, parsing, opening the store,
    creating the session, at the prompt): 130 and never a traceback once plait's entry
    point runs."""
    db = f"sqlite:///{tmp_path / 'chat.db'}"
    argv = [sys.executable, "-c", _CONSOLE, *_chat(tmp_path, db, GREET)]
    for delay in (0.0, 0.02, 0.05, 0.15, 0.3, 0.6, 1.0, 2.0):
        proc = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        assert proc.stderr is not None and proc.stderr.readline() == b"started\n"
        time.sleep(delay)  # where it is interrupted, not how long it takes
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
        assert proc.returncode in (130, -signal.SIGINT), (delay, proc.returncode, err)
        if b"Traceback" in err + out:
            # importing plait's package and the entry point's module (~1 ms) comes before
            # run() can take Ctrl-C: there it is Python's default report, ended by the
            # signal itself
            assert not _IN_RUN.search(err.decode()), (delay, err.decode())
            assert proc.returncode == -signal.SIGINT, (delay, proc.returncode, err)
