"""Error paths: exit status 2, a one-line message on stderr naming what was wrong, the
documented ``{"error": {code, message, details}}`` on stdout with ``--json``, and no change
to what the store holds."""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from plait.entrypoints.cli.main import main
from tests.cli.conftest import Plait, Result, call, snapshot, write_script

SCRIPT: dict[str, Any] = {
    "version": 1,
    "model": "errors",
    "assistant": [
        {"tool_calls": [call("read_file", "c1", path="notes.txt")]},
        {"text": "Done."},
    ],
}


@dataclass
class World:
    """A store holding one session with one completed run."""

    plait: Plait
    tmp: Path
    workspace: Path
    model: str
    session_id: str
    run_id: str


@pytest.fixture
def world(plait: Plait, workspace: Path, tmp_path: Path) -> World:
    model = write_script(tmp_path, "errors", SCRIPT)
    sid = plait.new_session(workspace)
    run = plait.json("send", sid, "hi", "--model", model)
    assert run["status"] == "completed"
    return World(plait, tmp_path, workspace, model, sid, run["run_id"])


def expect_error(plait: Plait, argv: list[str], code: str, *fragments: str) -> dict[str, Any]:
    """Run ``argv`` with and without ``--json``: both exit 2 and change nothing."""
    before = snapshot(plait.db)

    as_json = plait(*argv, "--json")
    assert as_json.code == 2, (as_json.code, as_json.out, as_json.err)
    error = as_json.json["error"]
    assert set(error) == {"code", "message", "details"}
    assert error["code"] == code, error
    assert isinstance(error["details"], dict)
    for fragment in fragments:
        assert fragment in error["message"], (fragment, error["message"])
    _one_line_error(as_json, error["message"])

    as_text = plait(*argv)
    assert as_text.code == 2
    assert as_text.out == ""
    _one_line_error(as_text, error["message"])

    assert snapshot(plait.db) == before
    return dict(error)


def _one_line_error(r: Result, message: str) -> None:
    """The first line names the error; a usage error adds only a pointer to --help."""
    first, *rest = r.err.splitlines()
    assert first == f"plait: error: {message}"
    assert rest == [] or (len(rest) == 1 and rest[0].endswith(" --help' for how to call it"))
    assert "Traceback" not in r.err


# --- unknown ids -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "code"),
    [
        (["history", "ses_nope"], "session_not_found"),
        (["send", "ses_nope", "hi", "--model", "MODEL"], "session_not_found"),
        (["runs", "list", "--session", "ses_nope"], "session_not_found"),
        (["runs", "show", "run_nope"], "run_not_found"),
        (["runs", "cancel", "run_nope"], "run_not_found"),
        (
            ["runs", "resolve", "run_nope", "--call", "c1", "--status", "failed", "--note", "n"],
            "run_not_found",
        ),
        (["runs", "resume", "run_nope", "--model", "MODEL"], "run_not_found"),
        (["runs", "recover", "--run", "run_nope", "--model", "MODEL"], "run_not_found"),
    ],
)
def test_unknown_ids(world: World, argv: list[str], code: str) -> None:
    argv = [world.model if a == "MODEL" else a for a in argv]
    wrong = "ses_nope" if code == "session_not_found" else "run_nope"
    error = expect_error(world.plait, argv, code, f"'{wrong}'", "not found")
    assert wrong in error["details"].values()


# --- runs in the wrong state -------------------------------------------------------------------


def test_resolve_a_run_that_is_not_awaiting_resolution(world: World) -> None:
    argv = ["runs", "resolve", world.run_id, "--call", "c1", "--status", "succeeded"]
    error = expect_error(
        world.plait,
        [*argv, "--note", "checked"],
        "run_state",
        world.run_id,
        "is completed",
        "only a run awaiting resolution can be resolved",
    )
    assert error["details"]["status"] == "completed"


def test_resume_a_completed_run(world: World) -> None:
    error = expect_error(
        world.plait,
        ["runs", "resume", world.run_id, "--model", world.model],
        "run_state",
        world.run_id,
        "is completed",
        "runs recover",
    )
    assert error["details"] == {"run_id": world.run_id, "status": "completed"}


def test_recover_a_completed_run_skips_it(world: World) -> None:
    before = snapshot(world.plait.db)
    (report,) = world.plait.json("runs", "recover", "--run", world.run_id, "--model", world.model)[
        "recoveries"
    ]
    assert report["run_id"] == world.run_id
    assert report["outcome"] == "skipped"
    assert "completed" in report["detail"]
    assert report["run"] is None and report["messages"] == []
    assert snapshot(world.plait.db) == before


# --- bad input ---------------------------------------------------------------------------------


@pytest.mark.parametrize("text", ["", "   ", "\n\t"])
def test_empty_message_text(world: World, text: str) -> None:
    expect_error(
        world.plait,
        ["send", world.session_id, text, "--model", world.model],
        "invalid_value",
        "empty",
    )


def test_workspace_that_does_not_exist(world: World) -> None:
    error = expect_error(
        world.plait,
        ["sessions", "new", "--workspace", "no/such/dir"],
        "config_error",
        "'no/such/dir'",
        "not an existing directory",
    )
    assert error["details"] == {"workspace": "no/such/dir"}


def test_workspace_that_is_a_file(world: World) -> None:
    expect_error(
        world.plait,
        ["sessions", "new", "--workspace", str(world.workspace / "notes.txt")],
        "config_error",
        "notes.txt",
        "not an existing directory",
    )


def test_invalid_budget_flag(world: World) -> None:
    expect_error(
        world.plait,
        ["send", world.session_id, "hi", "--model", world.model, "--max-steps", "0"],
        "usage",
        "argument --max-steps: must be at least 1, got 0",
    )
    expect_error(
        world.plait,
        ["send", world.session_id, "hi", "--model", world.model, "--output-cap", "10"],
        "invalid_value",
        "--output-cap",
    )


# --- models ------------------------------------------------------------------------------------


def test_send_without_a_model(world: World) -> None:
    error = expect_error(
        world.plait,
        ["send", world.plait.new_session(), "hi"],  # one that never ran: no model
        "config_error",
        "no model chosen",
        "--model",
        "PLAIT_MODEL",
    )
    assert error["details"] == {}


def test_unknown_model_kind(world: World) -> None:
    error = expect_error(
        world.plait,
        ["send", world.session_id, "hi", "--model", "nope:gpt-x"],
        "config_error",
        "unknown model kind 'nope'",
        "scripted:PATH",
        "openai-compatible:BASE_URL#MODEL",
    )
    assert error["details"] == {"spec": "nope:gpt-x"}


def test_model_spec_without_a_kind(world: World) -> None:
    expect_error(
        world.plait,
        ["send", world.session_id, "hi", "--model", "script.yaml"],
        "config_error",
        "'script.yaml'",
        "KIND:NAME",
    )


def test_missing_script_file(world: World) -> None:
    missing = world.tmp / "nowhere" / "script.yaml"
    error = expect_error(
        world.plait,
        ["send", world.session_id, "hi", "--model", f"scripted:{missing}"],
        "script_error",
        "script file not found",
        str(missing),
    )
    assert error["details"]["file"] == str(missing)


def test_script_with_a_typo_in_a_key(world: World) -> None:
    path = world.tmp / "typo.yaml"
    path.write_text(
        "version: 1\n"
        "assistant:\n"
        "  - text: Let me look.\n"
        "    tool_cals:\n"
        "      - {name: read_file, arguments: {path: notes.txt}}\n",
        encoding="utf-8",
    )
    error = expect_error(
        world.plait,
        ["send", world.session_id, "hi", "--model", f"scripted:{path}"],
        "script_error",
        "unknown key 'tool_cals'",
        "assistant turn 1",
        "typo.yaml",
        "did you mean 'tool_calls'?",
    )
    assert error["details"]["key"] == "tool_cals"
    assert error["details"]["turn"] == 1
    assert error["details"]["role"] == "assistant"


def test_script_with_invalid_yaml(world: World) -> None:
    path = world.tmp / "broken.yaml"
    path.write_text("version: 1\nassistant:\n  - text: [unclosed\n", encoding="utf-8")
    error = expect_error(
        world.plait,
        ["send", world.session_id, "hi", "--model", f"scripted:{path}"],
        "script_error",
        "invalid YAML",
        "broken.yaml",
    )
    assert "line" in error["details"]


def test_model_errors_reach_recover_and_resume_too(world: World) -> None:
    expect_error(
        world.plait,
        ["runs", "recover", "--model", "nope:x"],
        "config_error",
        "unknown model kind 'nope'",
    )
    expect_error(
        world.plait,
        ["runs", "resume", world.run_id, "--model", f"scripted:{world.tmp / 'none.yaml'}"],
        "script_error",
        "script file not found",
    )


# --- stores ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "named"),
    [
        ("redis://localhost/0", "'redis://localhost/0'"),
        ("sqlite://plait.db", "'sqlite://plait.db'"),
        ("plait.db", "'plait.db'"),
    ],
)
def test_unknown_store_url(plait: Plait, tmp_path: Path, url: str, named: str) -> None:
    for argv in (["sessions", "list"], ["sessions", "new"], ["history", "ses_x"]):
        r = plait(*argv, "--db", url, "--json")
        assert r.code == 2, r
        error = r.json["error"]
        assert error["code"] == "config_error"
        assert named in error["message"]
        assert "sqlite:///" in error["message"] and "jsonl:///" in error["message"]
        _one_line_error(r, error["message"])
    assert list(tmp_path.iterdir()) == []  # nothing was created


def test_unknown_store_url_from_the_environment(
    plait: Plait, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PLAIT_DB", "mysql://x")
    r = plait.raw("sessions", "list")
    assert r.code == 2
    assert "unknown store URL 'mysql://x'" in r.err


def _corrupt(path: Path) -> bytes:
    data = hashlib.sha256(b"seed").digest() * 256  # 8 KiB of noise, the same every run
    path.write_bytes(data)
    return data


@pytest.mark.parametrize(
    "argv",
    [
        ["sessions", "list"],
        ["sessions", "new"],
        ["history", "ses_x"],
        ["send", "ses_x", "hi", "--model", "MODEL"],
        ["runs", "list"],
        ["runs", "show", "run_x"],
        ["runs", "cancel", "run_x"],
        ["runs", "recover", "--model", "MODEL"],
    ],
)
def test_corrupt_sqlite_file(plait: Plait, tmp_path: Path, argv: list[str]) -> None:
    model = write_script(tmp_path, "m", SCRIPT)
    argv = [model if a == "MODEL" else a for a in argv]
    store_dir = tmp_path / "store"
    store_dir.mkdir()
    bad = store_dir / "bad.db"
    data = _corrupt(bad)
    url = f"sqlite:///{bad}"
    for extra in (["--json"], []):
        r = plait(*argv, "--db", url, *extra)
        assert r.code == 2, (r.code, r.out, r.err)
        assert "not a valid plait SQLite store" in r.err
        assert str(bad) in r.err
        assert "Traceback" not in r.err
        if extra:
            error = r.json["error"]
            assert error["code"] == "corrupt_store"
            assert error["details"]["path"] == str(bad)
            _one_line_error(r, error["message"])
        else:
            assert r.out == ""
    assert bad.read_bytes() == data
    assert sorted(os.listdir(store_dir)) == ["bad.db"]  # no -wal / -journal left behind


# --- argument errors ---------------------------------------------------------------------------


def _bad_args(plait: Plait, *argv: str) -> tuple[object, str, str]:
    """Exit status, stdout and stderr of a command line argparse rejects (today argparse
    exits from inside ``main()``; a fix may make ``main()`` return 2 instead)."""
    plait.captured()
    try:
        code: object = main(list(argv))
    except SystemExit as e:
        code = e.code
    out, err = plait.captured()
    return code, out, err


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["send", "ses_x"],
        ["sessions"],
        ["runs", "resolve", "r", "--call", "c", "--status", "maybe", "--note", "n"],
        ["runs", "resolve", "r", "--status", "failed", "--note", "n"],
        ["send", "s", "hi", "--max-steps", "many"],
        ["frobnicate"],
    ],
)
def test_bad_arguments_exit_2(plait: Plait, argv: list[str]) -> None:
    code, out, err = _bad_args(plait, *argv)
    assert code == 2
    assert out == ""
    assert "plait" in err and "error:" in err
    assert "Traceback" not in err


def test_bad_arguments_with_json_print_the_json_error(plait: Plait) -> None:
    argv = ["--json", "runs", "resolve", "r", "--call", "c", "--status", "maybe", "--note", "n"]
    code, out, err = _bad_args(plait, *argv)
    assert code == 2
    assert "--status" in json.loads(out)["error"]["message"]
    assert err.strip()


def test_negative_limit_is_rejected(world: World) -> None:
    code, _out, err = _bad_args(
        world.plait, "sessions", "list", "--limit", "-1", "--db", world.plait.db
    )
    assert code == 2
    assert "--limit" in err


@pytest.mark.parametrize(
    "argv",
    [
        ["sessions", "list"],
        ["history", "ses_x"],
        ["runs", "recover"],
        ["db", "upgrade"],
        ["keys", "create", "--principal", "ana"],
    ],
)
def test_a_password_given_as_query_parameter_is_not_printed(plait: Plait, argv: list[str]) -> None:
    """An attack found ``?password=`` printed whole in the error of an unreachable store."""
    secret = "hunter2-sekret"
    url = f"postgresql://plait@127.0.0.1:1/plait?sslmode=disable&password={secret}"
    for form in ("--json", None):
        r = plait.raw(*argv, "--db", url, *([form] if form else []))
        assert r.code != 0, (r.out, r.err)
        assert "127.0.0.1" in r.out + r.err
        assert secret not in r.out + r.err
