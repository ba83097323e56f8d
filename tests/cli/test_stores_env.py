"""Every store URL form end to end, the default store, and ``PLAIT_DB`` / ``PLAIT_MODEL``."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli.conftest import Plait, call, snapshot, write_script


@pytest.fixture
def model(tmp_path: Path) -> str:
    return write_script(
        tmp_path,
        "store-flow",
        {
            "version": 1,
            "model": "store-flow",
            "assistant": [
                {"tool_calls": [call("read_file", "c1", path="notes.txt")]},
                {"text": "It says hello."},
                {"text": "Second answer."},
            ],
        },
    )


def _conversation(plait: Plait, url: str, workspace: Path, model: str) -> str:
    """Two sends in two 'processes', then every read command, all against ``url``."""
    sid = plait.json("sessions", "new", "--workspace", str(workspace), "--db", url)["session_id"]
    first = plait.json("send", sid, "read the notes", "--model", model, "--db", url)
    assert first["status"] == "completed"
    second = plait.json("send", sid, "and again", "--model", model, "--db", url)
    assert [m.get("text") for m in second["messages"]] == ["and again", "Second answer."]
    history = plait.json("history", sid, "--db", url)["messages"]
    assert isinstance(sid, str)
    assert [m["seq"] for m in history] == [1, 2, 3, 4, 5, 6]
    assert history[2]["status"] == "succeeded"
    assert history[2]["content"].startswith("hello plait")
    assert [s["session_id"] for s in plait.json("sessions", "list", "--db", url)["sessions"]] == [
        sid
    ]
    assert [r["run_id"] for r in plait.json("runs", "list", "--db", url)["runs"]] == [
        second["run_id"],
        first["run_id"],
    ]
    shown = plait.json("runs", "show", first["run_id"], "--db", url)
    assert [e["call_id"] for e in shown["executions"]] == ["c1"]
    return sid


def test_sqlite_relative_url_is_relative_to_the_cwd(
    plait: Plait, workspace: Path, model: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    here = tmp_path / "here"
    here.mkdir()
    monkeypatch.chdir(here)
    sid = _conversation(plait, "sqlite:///rel/dir/plait.db", workspace, model)
    assert (here / "rel" / "dir" / "plait.db").is_file()
    assert [
        s["session_id"] for s in snapshot(f"sqlite:///{here / 'rel/dir/plait.db'}")["sessions"]
    ] == [sid]
    # the same relative URL from another directory is another store
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    other = plait("sessions", "list", "--db", "sqlite:///rel/dir/plait.db", "--json")
    assert other.code == 2 and other.json["error"]["code"] == "store_not_found"
    assert list(elsewhere.iterdir()) == []  # a read creates nothing


def test_sqlite_absolute_url(plait: Plait, workspace: Path, model: str, tmp_path: Path) -> None:
    path = tmp_path / "abs" / "store.db"
    url = f"sqlite:///{path}"
    assert url.startswith("sqlite:////")
    _conversation(plait, url, workspace, model)
    assert path.is_file()
    assert not (tmp_path / ".plait").exists()  # the default store was not used


def test_jsonl_absolute_url(plait: Plait, workspace: Path, model: str, tmp_path: Path) -> None:
    directory = tmp_path / "jsonl-store"
    url = f"jsonl:///{directory}"
    assert url.startswith("jsonl:////")
    sid = _conversation(plait, url, workspace, model)
    assert (directory / "sessions" / f"{sid}.jsonl").is_file()
    assert not (tmp_path / ".plait").exists()


def test_jsonl_relative_url(plait: Plait, workspace: Path, model: str, tmp_path: Path) -> None:
    sid = _conversation(plait, "jsonl:///rel-jsonl", workspace, model)
    assert (tmp_path / "rel-jsonl" / "sessions" / f"{sid}.jsonl").is_file()


def test_memory_store_lives_only_as_long_as_the_command(plait: Plait, tmp_path: Path) -> None:
    created = plait.json("sessions", "new", "--db", "memory://")
    assert created["session_id"].startswith("ses_")
    assert plait.json("sessions", "list", "--db", "memory://")["sessions"] == []
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # nothing written to disk


def test_default_store_is_in_the_user_data_dir(
    plait: Plait, workspace: Path, model: str, tmp_path: Path
) -> None:
    sid = plait.raw("--json", "sessions", "new", "--workspace", str(workspace)).json["session_id"]
    assert (tmp_path / "xdg" / "plait" / "plait.db").is_file()
    assert not (tmp_path / ".plait").exists()
    sent = plait.raw("send", sid, "hi", "--model", model, "--json")
    assert sent.code == 0 and sent.json["status"] == "completed"
    assert len(plait.raw("--json", "history", sid).json["messages"]) == 4
    assert (
        snapshot(f"sqlite:///{tmp_path / 'xdg' / 'plait' / 'plait.db'}")["sessions"][0][
            "session_id"
        ]
        == sid
    )


def test_plait_db_env_var_and_db_flag_precedence(
    plait: Plait, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env_db = tmp_path / "from-env.db"
    monkeypatch.setenv("PLAIT_DB", f"sqlite:///{env_db}")
    sid = plait.raw("--json", "sessions", "new").json["session_id"]
    assert env_db.is_file()
    assert not (tmp_path / ".plait").exists()
    assert [s["session_id"] for s in plait.raw("--json", "sessions", "list").json["sessions"]] == [
        sid
    ]

    flag_db = tmp_path / "from-flag.db"
    other = plait.raw("--json", "sessions", "new", "--db", f"sqlite:///{flag_db}").json
    assert flag_db.is_file()
    assert [s["session_id"] for s in snapshot(f"sqlite:///{flag_db}")["sessions"]] == [
        other["session_id"]
    ]
    assert [s["session_id"] for s in snapshot(f"sqlite:///{env_db}")["sessions"]] == [sid]

    monkeypatch.setenv("PLAIT_DB", f"jsonl:///{tmp_path / 'env-jsonl'}")
    third = plait.raw("--json", "sessions", "new").json["session_id"]
    assert (tmp_path / "env-jsonl" / "sessions" / f"{third}.jsonl").is_file()


def test_plait_model_env_var_and_model_flag_precedence(
    plait: Plait, workspace: Path, model: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PLAIT_MODEL", model)
    sid = plait.new_session(workspace)
    run = plait.json("send", sid, "hi")
    assert run["status"] == "completed"
    assert run["model"] == "scripted:store-flow"

    other = write_script(
        tmp_path,
        "other",
        {"version": 1, "model": "other", "assistant": [{"text": "from the flag"}]},
    )
    sid2 = plait.new_session(workspace)
    run2 = plait.json("send", sid2, "hi", "--model", other)
    assert run2["model"] == "scripted:other"
    assert run2["messages"][-1]["text"] == "from the flag"

    # a bad PLAIT_MODEL is reported as such (sid remembers its model: a new session)
    fresh = plait.new_session(workspace)
    monkeypatch.setenv("PLAIT_MODEL", "nonsense")
    r = plait("send", fresh, "hi")
    assert r.code == 2
    assert "model spec 'nonsense'" in r.err
