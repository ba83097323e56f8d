"""``plait sessions fork|show|tree`` and what ``plait history`` says about a branch."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from plait.adapters.stores import open_store
from plait.entrypoints.cli.main import main
from tests.fork.conftest import run, seed
from tests.pg import empty_database


@pytest.fixture(params=["sqlite", "jsonl", "postgres"])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "postgres":
        url: str = request.getfixturevalue("pg_url")
        empty_database(url)
        return url
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'plait.db'}"
    return f"jsonl:///{tmp_path / 'store'}"


def _seed(db: str, workspace: Path | None = None) -> None:
    async def go() -> None:
        store = open_store(db)
        await seed(store, workspace=None if workspace is None else str(workspace))
        await store.close()

    run(go())


def plait(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, Any, str]:
    code = main([*argv])
    out, err = capsys.readouterr()
    try:
        data = json.loads(out) if "--json" in argv else out
    except json.JSONDecodeError:
        data = out
    return code, data, err


@pytest.mark.slow
def test_fork_show_tree_and_history(
    db: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    _seed(db, ws)
    code, made, _ = plait(capsys, "sessions", "fork", "S", "--through", "m3", "--db", db, "--json")
    assert code == 0 and made["created"] is True
    branch = made["session"]["session_id"]
    assert made["session"]["fork_origin"] == {
        "parent_session_id": "S",
        "fork_point_message_id": "m3",
    }
    assert made["session"]["version"] == 3
    request_id = made["fork"]["request_id"]
    assert request_id.startswith("req_")  # generated, and printed for a retry
    assert made["workspace"] == {
        "path": str(ws),
        "rolled_back": False,
        "snapshot": None,
        "note": made["workspace"]["note"],
    }
    assert "not rolled back" in made["workspace"]["note"]

    # A retry with the printed request id returns the same branch; text mode says so.
    code, text, _ = plait(
        capsys, "sessions", "fork", "S", "--through", "3", "--request-id", request_id, "--db", db
    )
    assert code == 0
    assert f"already created by this request id: branch {branch}" in text
    code, _, err = plait(
        capsys, "sessions", "fork", "S", "--through", "m5", "--request-id", request_id, "--db", db
    )
    assert code == 2 and "new request id" in err

    code, shown, _ = plait(capsys, "sessions", "show", branch, "--db", db, "--json")
    assert shown["fork"]["through_message_id"] == "m3" and shown["fork"]["through_seq"] == 3
    assert shown["workspace_binding"]["rolled_back"] is False
    code, text, _ = plait(capsys, "sessions", "show", branch, "--db", db)
    assert "parent      S through m3 (#3)" in text and "not rolled back" in text
    code, shown, _ = plait(capsys, "sessions", "show", "S", "--db", db, "--json")
    assert shown["forks"] == [branch] and shown["fork"] is None

    code, text, _ = plait(capsys, "history", branch, "--db", db)
    assert text.splitlines()[0] == "branch of session S through m3 (#3)"
    assert f"workspace {ws}: files were not rolled back" in text.splitlines()[1]
    assert "[3] read_file" in text and "[4]" not in text
    code, hist, _ = plait(capsys, "history", branch, "--db", db, "--json")
    assert [m["message_id"] for m in hist["messages"]] == ["m1", "m2", "m3"]
    assert hist["workspace"]["path"] == str(ws) and hist["workspace"]["rolled_back"] is False

    code, made2, _ = plait(
        capsys, "sessions", "fork", branch, "--through", "m1", "--db", db, "--json"
    )
    grandchild = made2["session"]["session_id"]
    code, tree, _ = plait(capsys, "sessions", "tree", grandchild, "--db", db, "--json")
    assert tree["roots"] == [
        {
            "session_id": "S",
            "fork_point_message_id": None,
            "version": 6,
            "workspace": str(ws),
            "delegated_by": None,
            "children": [
                {
                    "session_id": branch,
                    "fork_point_message_id": "m3",
                    "version": 3,
                    "workspace": str(ws),
                    "delegated_by": None,
                    "children": [
                        {
                            "session_id": grandchild,
                            "fork_point_message_id": "m1",
                            "version": 1,
                            "workspace": str(ws),
                            "delegated_by": None,
                            "children": [],
                        }
                    ],
                }
            ],
        }
    ]
    code, text, _ = plait(capsys, "sessions", "tree", "S", "--db", db)
    assert text.splitlines() == [
        "S  (6 messages)  ← this session",
        f"└── {branch}  through m3  (3 messages)",
        f"    └── {grandchild}  through m1  (1 message)",
    ]


@pytest.mark.slow
def test_fork_errors(db: str, capsys: pytest.CaptureFixture[str]) -> None:
    _seed(db)
    code, data, _ = plait(capsys, "sessions", "fork", "S", "--through", "m2", "--db", db, "--json")
    assert code == 2
    assert data["error"]["code"] == "invalid_cut_point"
    assert data["error"]["details"]["before"] == "m1" and data["error"]["details"]["after"] == "m3"
    code, data, _ = plait(capsys, "sessions", "fork", "S", "--through", "99", "--db", db, "--json")
    assert data["error"]["code"] == "message_not_found"
    code, data, _ = plait(capsys, "sessions", "fork", "X", "--through", "m1", "--db", db, "--json")
    assert data["error"]["code"] == "session_not_found"
    code, data, _ = plait(
        capsys, "sessions", "fork", "S", "--through", "m3", "--snapshot", "--db", db, "--json"
    )
    assert data["error"]["code"] == "config_error" and "no workspace" in data["error"]["message"]
    code, data, _ = plait(capsys, "sessions", "list", "--db", db, "--json")
    assert [s["session_id"] for s in data["sessions"]] == ["S"]  # nothing was created


@pytest.mark.slow
def test_snapshot_of_a_non_git_workspace_is_a_clear_error(
    db: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ws = tmp_path / "plain"
    ws.mkdir()
    _seed(db, ws)
    code, data, _ = plait(
        capsys, "sessions", "fork", "S", "--through", "m3", "--snapshot", "--db", db, "--json"
    )
    assert code == 2
    assert "not inside a git work tree" in data["error"]["message"]
    assert "without --snapshot" in data["error"]["message"]
    code, data, _ = plait(capsys, "sessions", "list", "--db", db, "--json")
    assert [s["session_id"] for s in data["sessions"]] == ["S"]


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args],
        cwd=cwd,
        check=True,
        capture_output=True,
        text=True,
    ).stdout


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_snapshot_binds_the_branch_to_a_worktree_of_the_working_tree(
    db: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    ws = tmp_path / "repo"
    ws.mkdir()
    _git(ws, "init", "-q")
    (ws / "package.json").write_text("v1\n")
    (ws / ".gitignore").write_text("*.log\n")
    _git(ws, "add", "package.json", ".gitignore")
    _git(ws, "commit", "-qm", "init")
    (ws / "package.json").write_text("v2, not committed\n")
    (ws / "notes.txt").write_text("untracked\n")
    (ws / "debug.log").write_text("ignored\n")
    _git(ws, "add", ".gitignore")  # something staged: the user's index must not change
    index_before = (ws / ".git" / "index").read_bytes()
    status_before = _git(ws, "status", "--porcelain")
    _seed(db, ws)

    code, made, _ = plait(
        capsys, "sessions", "fork", "S", "--through", "m3", "--snapshot", "--db", db, "--json"
    )
    assert code == 0, made
    snap = made["fork"]["snapshot"]
    wt = Path(made["session"]["workspace"])
    assert wt == Path(snap["worktree"]) and wt.is_dir() and wt != ws
    assert tmp_path / "data" in wt.parents
    assert (wt / "package.json").read_text() == "v2, not committed\n"
    assert (wt / "notes.txt").read_text() == "untracked\n"
    assert not (wt / "debug.log").exists()
    assert any("ignored" in n for n in snap["not_covered"])
    assert any("databases" in n for n in snap["not_covered"])
    assert _git(ws, "rev-parse", snap["ref"]).strip() == snap["commit"]
    assert (ws / ".git" / "index").read_bytes() == index_before
    assert _git(ws, "status", "--porcelain") == status_before
    assert made["workspace"]["snapshot"]["commit"] == snap["commit"]
    assert "not covered" in made["workspace"]["note"]
    # The source workspace changes later; the branch's worktree does not.
    (ws / "package.json").write_text("v3\n")
    assert (wt / "package.json").read_text() == "v2, not committed\n"
    code, text, _ = plait(capsys, "sessions", "show", made["session"]["session_id"], "--db", db)
    assert "snapshot" in text and "not covered" in text


def test_fork_commands_never_create_a_store(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = f"sqlite:///{tmp_path / 'absent.db'}"
    for argv in (["fork", "S", "--through", "m1"], ["show", "S"], ["tree", "S"]):
        code, data, _ = plait(capsys, "sessions", *argv, "--db", db, "--json")
        assert code == 2 and data["error"]["code"] == "store_not_found"
    assert list(tmp_path.iterdir()) == []


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_a_fork_that_fails_after_the_snapshot_leaves_no_ref_or_worktree(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from plait.adapters.snapshots import GitSnapshots
    from plait.adapters.stores.memory.store import MemoryStore
    from plait.domain.errors import StoreError
    from tests.fork.conftest import forks_over

    ws = tmp_path / "repo"
    ws.mkdir()
    _git(ws, "init", "-q")
    (ws / "a.txt").write_text("a\n")
    worktrees = tmp_path / "worktrees"
    store = MemoryStore()

    async def broken(commit: Any) -> Any:
        raise StoreError("disk full")

    async def go() -> None:
        await seed(store, workspace=str(ws))
        monkeypatch.setattr(store, "fork_session", broken)
        forks = forks_over(store, snapshots=GitSnapshots(worktrees))
        with pytest.raises(StoreError, match="disk full"):
            await forks.fork_session("S", "m3", "req-1", snapshot=True)

    run(go())
    assert _git(ws, "for-each-ref", "refs/plait") == ""
    assert list(worktrees.iterdir()) == []
    assert len(_git(ws, "worktree", "list").splitlines()) == 1
