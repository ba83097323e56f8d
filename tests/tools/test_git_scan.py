"""Finding git places in a workspace, in full and again after a command (only the
directories whose ctime changed are listed again)."""

from __future__ import annotations

import os
import resource
from pathlib import Path

import pytest

from plait.adapters.tools._git import scan_git, undo_new_git


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    for d in ("a/b/c", "a/d", "vendor/lib/.git/hooks", "fixtures/repo.git/objects", "e"):
        (root / d).mkdir(parents=True)
    (root / "fixtures" / "repo.git" / "HEAD").write_text("ref: refs/heads/main\n")
    (root / "e" / ".git").write_text("gitdir: ../vendor/lib/.git\n")
    return root


def _next_tick(root: Path) -> None:
    """Wait (bounded) until a change gets a later ctime than anything under ``root`` has:
    the kernel stamps with a coarse clock, and plait relies on bwrap's set-up taking
    longer than one of its ticks."""
    newest = max(os.stat(d).st_ctime_ns for d, _, _ in os.walk(root))
    probe = root.parent / "tick"
    for _ in range(1_000_000):
        probe.touch()
        if os.stat(probe).st_ctime_ns > newest:
            return
    raise AssertionError("the clock did not move")


def test_a_full_scan_finds_dot_git_entries_and_bare_repositories(tree: Path) -> None:
    assert sorted(scan_git(str(tree)).places) == ["e/.git", "fixtures/repo.git", "vendor/lib/.git"]


def test_an_unchanged_tree_is_not_listed_again(tree: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    before = scan_git(str(tree))
    listed: list[int] = []
    real = os.scandir

    def counting(fd: int) -> object:
        listed.append(fd)
        return real(fd)

    monkeypatch.setattr(os, "scandir", counting)
    again = scan_git(str(tree), since=before)
    assert again.places == before.places
    assert listed == []


@pytest.mark.parametrize(
    "change",
    [
        lambda root: (root / "a" / "b" / "c" / ".git").mkdir(),
        lambda root: (root / "a" / "d" / ".git").write_text("gitdir: x\n"),
        lambda root: (root / "a" / "new" / "deeper" / ".git").mkdir(parents=True),
        lambda root: [(root / "a" / "objects").mkdir(), (root / "a" / "HEAD").write_text("x")],
    ],
)
def test_a_new_git_place_is_found_and_undone_incrementally(tree: Path, change: object) -> None:
    before = scan_git(str(tree))
    _next_tick(tree)
    change(tree)  # type: ignore[operator]
    # Setting the parent's mtime back does not hide it: the ctime changed all the same.
    for d, _, _ in os.walk(tree):
        os.utime(d, ns=(0, 0))
    assert scan_git(str(tree), since=before).places != before.places
    undone = undo_new_git(str(tree), before, incremental=True)
    assert len(undone) == 1
    assert scan_git(str(tree)).places == before.places
    assert (tree / "vendor" / "lib" / ".git" / "hooks").is_dir()


def test_a_wide_tree_needs_few_descriptors(tmp_path: Path) -> None:
    root = tmp_path / "wide"
    for n in range(600):
        (root / f"d{n:03}").mkdir(parents=True)
    (root / "d599" / ".git").mkdir()
    (root / "d000" / ".git").mkdir()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (128, hard))
    try:
        found = scan_git(str(root))
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert sorted(found.places) == ["d000/.git", "d599/.git"]
