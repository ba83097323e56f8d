"""Every bad input, through the CLI: exit status 2, the first stderr line names the problem
(``plait: error: ...``; a usage error adds one line pointing to ``--help``), ``--json``
prints the documented error object, and the store is byte-for-byte what it was."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from plait.entrypoints.cli.main import main
from tests.cli.conftest import Plait, Result, call, child_env, write_script

SCRIPT = {
    "version": 1,
    "model": "bad-inputs",
    "assistant": [
        {"tool_calls": [call("read_file", "c1", path="notes.txt")]},
        {"text": "Done."},
    ],
}


@dataclass
class Env:
    plait: Plait
    tmp: Path
    store: Path
    model: str
    session_id: str


@pytest.fixture
def env(plait: Plait, workspace: Path, tmp_path: Path) -> Env:
    model = write_script(tmp_path, "good", SCRIPT)
    sid = plait.new_session(workspace)
    assert plait.json("send", sid, "hi", "--model", model)["status"] == "completed"
    (tmp_path / "latin1.txt").write_bytes(b"caf\xe9\n")
    (tmp_path / "latin1.yaml").write_bytes(b"version: 1\nassistant:\n  - text: caf\xe9\n")
    (tmp_path / "empty.txt").write_bytes(b"  \n")
    return Env(plait, tmp_path, tmp_path / "store", model, sid)


@dataclass(frozen=True)
class Case:
    name: str
    argv: list[str]
    code: str
    first_line: str
    stdin: bytes | None = None
    usage: bool = False
    extra: list[str] = field(default_factory=list)


NOSTORE = "sqlite:///TMP/nowhere/sub/x.db"

CASES = [
    Case(
        "argument not UTF-8",
        ["send", "SID", "caf\udce9", "--model", "MODEL"],
        "usage",
        "argument 3 ('caf\\xe9') is not valid UTF-8 (byte 0xe9 at offset 3); pass UTF-8 "
        "text, or a long message with --file or stdin",
        usage=True,
    ),
    Case(
        "stdin not UTF-8 (TEXT -)",
        ["send", "SID", "-", "--model", "MODEL"],
        "invalid_input",
        "standard input is not valid UTF-8 (byte 0xe9 at offset 3); convert it to UTF-8 "
        "(e.g. with iconv) and try again",
        stdin=b"caf\xe9",
    ),
    Case(
        "stdin not UTF-8 (no TEXT)",
        ["send", "SID", "--model", "MODEL"],
        "invalid_input",
        "standard input is not valid UTF-8 (byte 0xff at offset 0)",
        stdin=b"\xff",
    ),
    Case(
        "empty stdin",
        ["send", "SID", "-", "--model", "MODEL"],
        "invalid_input",
        "the message from stdin is empty; write the message there",
        stdin=b"",
    ),
    Case(
        "--file not UTF-8",
        ["send", "SID", "--file", "TMP/latin1.txt", "--model", "MODEL"],
        "invalid_input",
        "--file 'TMP/latin1.txt' is not valid UTF-8 (byte 0xe9 at offset 3)",
    ),
    Case(
        "--file missing",
        ["send", "SID", "--file", "TMP/absent.txt", "--model", "MODEL"],
        "invalid_input",
        "cannot read --file 'TMP/absent.txt': No such file or directory",
    ),
    Case(
        "--file empty",
        ["send", "SID", "--file", "TMP/empty.txt", "--model", "MODEL"],
        "invalid_input",
        "the message from --file 'TMP/empty.txt' is empty",
    ),
    Case(
        "TEXT and --file",
        ["send", "SID", "hi", "--file", "TMP/latin1.txt", "--model", "MODEL"],
        "usage",
        "give the message as TEXT or with --file, not both",
        usage=True,
    ),
    Case(
        "script file not UTF-8",
        ["send", "SID", "hi", "--model", "scripted:TMP/latin1.yaml"],
        "script_error",
        "script file TMP/latin1.yaml is not valid UTF-8 (byte 0xe9 at offset 35); save it as UTF-8",
    ),
    Case(
        "script file missing",
        ["send", "SID", "hi", "--model", "scripted:TMP/absent.yaml"],
        "script_error",
        "script file not found: TMP/absent.yaml",
    ),
    # "no model" on a session that never ran: tests/cli/test_session_model.py (this one
    # has run, so it remembers its model)
    Case(
        "--max-steps 0",
        ["send", "SID", "hi", "--model", "MODEL", "--max-steps", "0"],
        "usage",
        "argument --max-steps: must be at least 1, got 0",
        usage=True,
    ),
    Case(
        "--deadline nan",
        ["send", "SID", "hi", "--model", "MODEL", "--deadline", "nan"],
        "usage",
        "argument --deadline: must be more than 0 seconds, got nan",
        usage=True,
    ),
    Case(
        "--max-cost 0",
        ["send", "SID", "hi", "--model", "MODEL", "--max-cost", "0"],
        "usage",
        "argument --max-cost: must be more than 0 dollars, got 0",
        usage=True,
    ),
    Case(
        "--max-cost not a number",
        ["send", "SID", "hi", "--model", "MODEL", "--max-cost", "ten"],
        "usage",
        "argument --max-cost: must be an amount of US dollars, got 'ten'",
        usage=True,
    ),
    Case(
        "--max-cost, model without prices",
        ["send", "SID", "hi", "--model", "MODEL", "--max-cost", "1"],
        "config_error",
        "a cost ceiling of $1 (--max-cost, Budget.max_cost_usd) needs the model's prices, but "
        "model 'scripted:bad-inputs' (MODEL) declares none; declare price_input_per_mtok and "
        "price_output_per_mtok for it (a [models.NAME] table in plait.toml, or a scripted "
        "model's capabilities) or drop the ceiling",
    ),
    Case(
        "chat --max-cost, model without prices",
        ["chat", "--workspace", "TMP", "--model", "MODEL", "--max-cost", "0.5"],
        "config_error",
        "a cost ceiling of $0.5 (--max-cost, Budget.max_cost_usd) needs the model's prices",
        stdin=b"hello\n",
    ),
    Case(
        "--output-cap too small",
        ["send", "SID", "hi", "--model", "MODEL", "--output-cap", "10"],
        "invalid_value",
        "--output-cap must be an integer >= 256",
    ),
    Case(
        "unknown command", ["frobnicate"], "usage", "argument COMMAND: invalid choice", usage=True
    ),
    Case("missing SESSION", ["send"], "usage", "the following arguments are required", usage=True),
    Case("unknown session", ["history", "ses_nope"], "session_not_found", "session 'ses_nope'"),
    Case("unknown run", ["runs", "show", "run_nope"], "run_not_found", "run 'run_nope'"),
    Case(
        "history, no store",
        ["history", "SID", "--db", NOSTORE],
        "store_not_found",
        f"no plait store at '{NOSTORE}'; check --db or PLAIT_DB",
    ),
    Case(
        "sessions list, no store",
        ["sessions", "list", "--db", NOSTORE],
        "store_not_found",
        "no plait store at",
    ),
    Case(
        "runs list, no JSONL store",
        ["runs", "list", "--db", "jsonl:///TMP/nowhere/j"],
        "store_not_found",
        "no plait store at 'jsonl:///TMP/nowhere/j'",
    ),
    Case(
        "runs cancel, no store",
        ["runs", "cancel", "run_x", "--db", NOSTORE],
        "store_not_found",
        "no plait store at",
    ),
    Case("bad store URL", ["sessions", "list", "--db", "mysql://x"], "config_error", "unknown"),
    Case(
        "workspace missing",
        ["sessions", "new", "--workspace", "TMP/absent"],
        "config_error",
        "workspace 'TMP/absent' is not an existing directory",
    ),
    Case(
        "unknown artifact",
        ["artifacts", "show", "art_x", "-o", "TMP/absent/out.bin"],
        "artifact_not_found",
        "artifact 'art_x' not found",
    ),
]


def _fill(items: list[str], env: Env) -> list[str]:
    def one(a: str) -> str:
        return (
            a.replace("SID", env.session_id)
            .replace("MODEL", env.model)
            .replace("TMP", str(env.tmp))
        )

    return [one(a) for a in items]


def _store_bytes(env: Env) -> dict[str, bytes]:
    return {str(p): p.read_bytes() for p in sorted(env.tmp.rglob("*")) if p.is_file()}


def _invoke(
    env: Env, argv: list[str], stdin: bytes | None, monkeypatch: pytest.MonkeyPatch
) -> Result:
    wrapper = io.TextIOWrapper(io.BytesIO(stdin or b""), encoding="utf-8")
    monkeypatch.setattr(sys, "stdin", wrapper)
    if "--db" not in argv:
        argv = [*argv, "--db", env.plait.db]
    return env.plait.raw(*argv)


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_bad_input(env: Env, case: Case, monkeypatch: pytest.MonkeyPatch) -> None:
    argv = _fill(case.argv, env)
    first_line = _fill([case.first_line], env)[0]
    before = _store_bytes(env)

    as_text = _invoke(env, argv, case.stdin, monkeypatch)
    assert as_text.code == 2, (as_text.code, as_text.out, as_text.err)
    assert as_text.out == ""
    lines = as_text.err.splitlines()
    assert lines[0].startswith("plait: error: "), lines
    assert first_line in lines[0], (first_line, lines[0])
    if case.usage:
        assert len(lines) == 2 and lines[1].endswith("--help' for how to call it"), lines
    else:
        assert len(lines) == 1, lines

    as_json = _invoke(env, [*argv, "--json"], case.stdin, monkeypatch)
    assert as_json.code == 2
    error = json.loads(as_json.out)["error"]
    assert error["code"] == case.code, error
    assert first_line in error["message"]
    assert as_json.err.splitlines()[0] == lines[0]

    assert _store_bytes(env) == before  # nothing written, nothing created


def test_chat_json_reports_a_bad_line_and_goes_on(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = write_script(env.tmp, "chat", {"version": 1, "assistant": [{"text": "Hello."}]})
    r = _invoke(env, ["chat", "--json", "--model", model], b"caf\xe9\nhello\n", monkeypatch)
    assert r.code == 0, r.err
    events = [json.loads(line) for line in r.out.splitlines()]
    assert [e["event"] for e in events] == ["session", "error", "message", "message", "run"]
    assert events[1]["error"]["code"] == "invalid_input"
    assert events[1]["error"]["message"].startswith("input line 1 is not valid UTF-8")
    assert events[-1]["status"] == "completed"


def _shell(command: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "-c", command],
        cwd=cwd,
        capture_output=True,
        text=True,
        env=child_env(),
        timeout=60,
        check=False,
    )


@pytest.mark.slow
def test_real_process_bytes_and_closed_stdout(env: Env) -> None:
    plait = f"{sys.executable} -m plait --db {env.plait.db}"
    before = _store_bytes(env)
    bad_arg = _shell(f"{plait} send {env.session_id} $'caf\\xe9' --model {env.model}", env.tmp)
    assert bad_arg.returncode == 2
    assert bad_arg.stderr.splitlines()[0].startswith(
        "plait: error: argument 5 ('caf\\xe9') is not valid UTF-8"
    )
    bad_stdin = _shell(
        f"printf 'caf\\xe9' | {plait} send {env.session_id} --model {env.model} --json", env.tmp
    )
    assert bad_stdin.returncode == 2
    assert json.loads(bad_stdin.stdout)["error"]["code"] == "invalid_input"
    for command in ("runs list", "sessions list", f"history {env.session_id}", "runs list --json"):
        piped = _shell(
            f"{plait} {command} | head -c 1 >/dev/null; echo ${{PIPESTATUS[0]}}", env.tmp
        )
        assert piped.stderr == "", (command, piped.stderr)
        assert piped.stdout.strip() in ("0", "2"), piped.stdout
    assert _store_bytes(env) == before


def test_closed_stdout_exits_quietly(
    env: Env, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def broken(*args: object, **kwargs: object) -> None:
        raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr("builtins.print", broken)
    monkeypatch.setattr("plait.entrypoints.cli.main._quiet_stdout", lambda: None)
    code = main(["runs", "list", "--db", env.plait.db])
    assert code == 2
    assert capsys.readouterr().err == ""
