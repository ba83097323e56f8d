"""The file tools refuse plait's own store by identity: under any spelling, through a hard
link or a symbolic link, files that do not exist yet (a SQLite ``-wal``), and whole
directories (a JSONL store); walks leave them out and say so."""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any

import pytest

from plait.adapters.tools import workspace_tools
from plait.domain.errors import PolicyError
from tests.tools.conftest import patch_os, run_tool


def _tools(protected: list[Path]) -> dict[str, Any]:
    return {t.spec.name: t for t in workspace_tools(protected=protected)}


def _denied(tools: dict[str, Any], ws: Path, name: str, **args: Any) -> str:
    with pytest.raises(PolicyError) as info:
        run_tool(tools[name], ws, **args)
    assert "plait's own store" in info.value.message
    if not str(args.get("path", "")).startswith("/"):
        assert str(ws) not in info.value.message  # no host path the model did not give
    return info.value.message


def test_every_spelling_of_a_protected_file_is_denied(ws: Path) -> None:
    (ws / "sub").mkdir()
    db = ws / "sub" / "agent.db"
    db.write_bytes(b"SQLite format 3\0")
    os.link(db, ws / "hard.db")
    (ws / "soft.db").symlink_to("sub/agent.db")
    tools = _tools([db, ws / "sub" / "agent.db-wal"])
    for path in ("sub/agent.db", "./sub/../sub/agent.db", str(db), "hard.db", "soft.db"):
        _denied(tools, ws, "read_file", path=path)
        _denied(tools, ws, "write_file", path=path, content="x")
        _denied(tools, ws, "edit_file", path=path, old_string="SQLite", new_string="x")
    _denied(tools, ws, "write_file", path="sub/agent.db-wal", content="x")
    assert not (ws / "sub" / "agent.db-wal").exists()
    assert db.read_bytes() == b"SQLite format 3\0"


def test_a_protected_directory_is_denied_and_hidden(ws: Path) -> None:
    store = ws / "store"
    (store / "artifacts").mkdir(parents=True)
    (store / "artifacts" / "art_1").write_text("secret output\n")
    (ws / "a.txt").write_text("output\n")
    tools = _tools([store])
    _denied(tools, ws, "list_dir", path="store")
    _denied(tools, ws, "search_text", pattern="output", path="store")
    _denied(tools, ws, "read_file", path="store/artifacts/art_1")
    _denied(tools, ws, "write_file", path="store/artifacts/new", content="x")
    listing = run_tool(tools["list_dir"], ws, path=".", recursive=True)
    assert listing.splitlines()[0] == "a.txt"
    assert listing.splitlines()[1].startswith("[1 entry not shown: it is part of plait's own")
    assert len(listing.splitlines()) == 2
    found = run_tool(tools["search_text"], ws, pattern="output")
    assert found.startswith("a.txt:1: output\n[1 entry not shown")
    assert not (store / "artifacts" / "new").exists()


def test_without_protection_nothing_changes(ws: Path) -> None:
    (ws / "agent.db").write_text("data\n")
    tools = _tools([])
    assert run_tool(tools["read_file"], ws, path="agent.db").startswith("data\n")


def test_search_reports_directories_it_cannot_read(
    ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (ws / "locked").mkdir()
    (ws / "locked" / "f.txt").write_text("needle\n")
    (ws / "open.txt").write_text("needle\n")
    real_open = os.open

    def refusing(path: Any, flags: int, *args: Any, **kw: Any) -> int:
        if path == "locked":
            raise PermissionError(errno.EACCES, "Permission denied")
        return real_open(path, flags, *args, **kw)

    patch_os(monkeypatch, open=refusing)
    found = run_tool(_tools([])["search_text"], ws, pattern="needle")
    assert found == "open.txt:1: needle\n[could not be read: locked]"


@pytest.mark.parametrize(
    ("url", "inner"),
    [
        ("sqlite:///{ws}/data/plait.db", "plait.db"),
        ("jsonl:///{ws}/data/store", "store/sessions/ses_1.jsonl"),
    ],
)
def test_write_file_after_the_store_directory_was_renamed(ws: Path, url: str, inner: str) -> None:
    """Issue 20: ``mv data data2`` (in a command, before the sandbox pinned the store's
    directory), then ``write_file data2/plait.db`` destroyed the store. The tools know the
    store by the identities it had when they were made, which a rename keeps."""
    from plait.adapters.stores import protected_paths

    (ws / "data" / "store" / "sessions").mkdir(parents=True)
    (ws / "data" / "plait.db").write_bytes(b"SQLite format 3\0")
    (ws / "data" / "store" / "sessions" / "ses_1.jsonl").write_text('{"op": "x"}\n')
    tools = _tools(list(protected_paths(url.format(ws=ws))))
    (ws / "data").rename(ws / "data2")
    _denied(tools, ws, "write_file", path=f"data2/{inner}", content="PWNED")
    _denied(tools, ws, "read_file", path=f"data2/{inner}")
    assert "PWNED" not in (ws / "data2" / inner).read_text(errors="replace")
    # The old place, made again, is still the store's place.
    (ws / "data").mkdir()
    _denied(
        tools,
        ws,
        "write_file",
        path="data/plait.db" if "sqlite" in url else "data/store/x",
        content="x",
    )
