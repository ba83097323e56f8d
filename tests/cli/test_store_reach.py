"""The agent cannot reach plait's own store: a scripted model tries to read, list, search
and overwrite the store and its artifacts, with the store inside the workspace (every
attempt ``denied``, naming why) and outside it (every attempt refused); afterwards the
store still opens and holds exactly what it held."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from plait.adapters.stores import protected_paths
from plait.runtime import data_dir, default_db_url
from tests.cli.conftest import Plait, call, snapshot, write_script

_ATTACKS = [
    ("read_file", {"path": "DB"}),
    ("read_file", {"path": "ABS_DB"}),
    ("list_dir", {"path": "DIR"}),
    ("search_text", {"pattern": "schema", "path": "DIR"}),
    ("write_file", {"path": "DB", "content": "gone"}),
    ("edit_file", {"path": "DB", "old_string": "SQLite", "new_string": "x"}),
    ("write_file", {"path": "WAL", "content": "gone"}),
    ("read_file", {"path": "ART"}),
    ("write_file", {"path": "ART", "content": "gone"}),
    ("read_file", {"path": "LINK"}),
]


def _store(kind: str, where: Path) -> tuple[str, Path, Path]:
    """(url, the store's main file or directory, a file holding an artifact or data)."""
    if kind == "sqlite":
        db = where / "agent.db"
        return f"sqlite:///{db}", db, db
    directory = where / "jsonl-store"
    return f"jsonl:///{directory}", directory, directory / "runs.jsonl"


def _script(tmp: Path, ws: Path, target: Path, data: Path) -> str:
    names = {
        "DB": str(data.relative_to(ws)) if data.is_relative_to(ws) else str(data),
        "ABS_DB": str(data),
        "DIR": str(target.parent.relative_to(ws)) if target.is_relative_to(ws) else "..",
        "WAL": str(target / "sessions" / "x.jsonl") if target.is_dir() else f"{target}-wal",
        "ART": str(target / "artifacts" / "x") if target.is_dir() else str(target) + "-shm",
        "LINK": "link-to-store",
    }
    calls: list[dict[str, Any]] = []
    for i, (name, args) in enumerate(_ATTACKS):
        args = {k: names.get(v, v) for k, v in args.items()}
        calls.append(call(name, f"c{i}", **args))
    return write_script(
        tmp, "attack", {"version": 1, "assistant": [{"tool_calls": calls}, {"text": "done"}]}
    )


@pytest.mark.parametrize("kind", ["sqlite", "jsonl"])
@pytest.mark.parametrize("inside", [True, False], ids=["inside", "outside"])
def test_the_tools_cannot_touch_the_store(
    plait: Plait, tmp_path: Path, workspace: Path, kind: str, inside: bool
) -> None:
    where = workspace / ".plait" if inside else tmp_path / "elsewhere"
    where.mkdir()
    url, target, data = _store(kind, where)
    (workspace / "link-to-store").symlink_to(data)
    sid = plait.json("sessions", "new", "--workspace", str(workspace), "--db", url)["session_id"]
    model = _script(tmp_path, workspace, target, data)

    run = plait.json("send", sid, "try it", "--model", model, "--db", url)

    assert run["status"] == "completed"
    results = [m for m in run["messages"] if m["kind"] == "tool_result"]
    assert len(results) == len(_ATTACKS)
    for m in results:
        if m["status"] == "succeeded":  # listing/searching the directory around the store
            assert m["tool_name"] in ("list_dir", "search_text"), m
            assert target.name not in m["content"], m
            assert "not shown: it is part of plait's own store" in m["content"], m
            continue
        assert m["status"] in ("denied", "failed"), m
        if inside:
            assert m["status"] == "denied", m
            assert "plait's own store" in m["content"], m
        assert "gone" not in m["content"]
    after = snapshot(url)
    assert [s["session_id"] for s in after["sessions"]] == [sid]
    # user, assistant with the calls, one result per call, the final answer
    assert len(after["messages"][sid]) == len(_ATTACKS) + 3
    assert after["messages"][sid] == plait.json("history", sid, "--db", url)["messages"]
    for path in where.rglob("*"):
        assert not path.is_file() or path.read_bytes() != b"gone", path


def test_listing_and_search_do_not_show_the_store(
    plait: Plait, tmp_path: Path, workspace: Path
) -> None:
    url = f"sqlite:///{workspace / 'agent.db'}"
    sid = plait.json("sessions", "new", "--workspace", str(workspace), "--db", url)["session_id"]
    model = write_script(
        tmp_path,
        "look",
        {
            "version": 1,
            "assistant": [
                {
                    "tool_calls": [
                        call("list_dir", "c1", path=".", recursive=True),
                        call("search_text", "c2", pattern="e"),
                    ]
                },
                {"text": "done"},
            ],
        },
    )
    run = plait.json("send", sid, "look", "--model", model, "--db", url)
    listing, search = (m for m in run["messages"] if m["kind"] == "tool_result")
    assert listing["status"] == search["status"] == "succeeded"
    assert "agent.db" not in listing["content"] and "notes.txt" in listing["content"]
    assert "not shown: it is part of plait's own store" in listing["content"]
    assert "agent.db" not in search["content"] and "notes.txt:1" in search["content"]


def test_default_store_lives_in_the_user_data_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert data_dir() == tmp_path / "xdg" / "plait"
    assert default_db_url() == f"sqlite:///{tmp_path / 'xdg' / 'plait' / 'plait.db'}"
    monkeypatch.setenv("XDG_DATA_HOME", "relative/ignored")  # the spec: must be absolute
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert data_dir() == tmp_path / "home" / ".local" / "share" / "plait"


def test_protected_paths_name_every_file_of_a_store(tmp_path: Path) -> None:
    db = tmp_path / "a.db"
    assert protected_paths(f"sqlite:///{db}") == (
        db,
        tmp_path / "a.db-wal",
        tmp_path / "a.db-shm",
        tmp_path / "a.db-journal",
    )
    assert protected_paths(f"jsonl:///{tmp_path / 'j'}") == (tmp_path / "j",)
    assert protected_paths("memory://") == ()
