"""No workspace tool reaches outside its workspace: ``..``, absolute paths, symbolic links
at any component, link loops, special files, and races that swap a directory for a link
while a call is running."""

from __future__ import annotations

import os
import stat
import threading
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from plait.adapters.tools._paths import MAX_SYMLINK_HOPS, Workspace
from plait.domain.errors import ToolError
from tests.tools.conftest import SECRET, Call, Fails, patch_os


def outside_untouched(outside: Path) -> None:
    assert sorted(p.name for p in outside.iterdir()) == ["secret.txt"]
    assert (outside / "secret.txt").read_text() == SECRET


def refused_everywhere(fails: Fails, path: str) -> list[str]:
    """Every tool refuses ``path``; returns the messages."""
    return [
        fails("read_file", path=path).message,
        fails("write_file", path=path + "/new.txt", content="x").message,
        fails("write_file", path=path, content="x").message,
        fails("edit_file", path=path, old_string="top", new_string="x").message,
        fails("list_dir", path=path).message,
        fails("search_text", pattern="secret", path=path).message,
    ]


# --- .., absolute paths, ~ -------------------------------------------------------------------


@pytest.mark.parametrize(
    "path", ["..", "../outside", "../outside/secret.txt", "sub/../../outside/secret.txt"]
)
def test_dotdot_cannot_escape(ws: Path, outside: Path, fails: Fails, path: str) -> None:
    (ws / "sub").mkdir()
    for message in refused_everywhere(fails, path):
        assert "leads outside the workspace" in message, message
    assert fails("read_file", path=path).message == f"path {path!r} leads outside the workspace"
    outside_untouched(outside)


def test_dotdot_inside_is_fine(ws: Path, call: Call) -> None:
    (ws / "sub").mkdir()
    (ws / "a.txt").write_text("a\n")
    assert call("read_file", path="sub/../a.txt").startswith("a\n")
    assert call("read_file", path="./sub/./../a.txt").startswith("a\n")


def test_absolute_paths(ws: Path, outside: Path, call: Call, fails: Fails) -> None:
    (ws / "a.txt").write_text("a\n")
    assert call("read_file", path=str(ws / "a.txt")).startswith("a\n")
    assert call("read_file", path=str(ws) + "//./a.txt").startswith("a\n")
    assert call("list_dir", path=str(ws)) == "a.txt"
    call("write_file", path=str(ws / "b.txt"), content="b")
    assert (ws / "b.txt").read_text() == "b"
    secret = str(outside / "secret.txt")
    assert fails("read_file", path=secret).message == f"path {secret!r} is outside the workspace"
    assert "is outside" in fails("read_file", path="/etc/passwd").message
    assert "leads outside" in fails("read_file", path=f"{ws}/../outside/secret.txt").message
    assert "is outside" in fails("write_file", path=str(outside / "n.txt"), content="x").message
    outside_untouched(outside)


def test_tilde_is_not_expanded(ws: Path, call: Call) -> None:
    (ws / "~").mkdir()
    (ws / "~" / "x.txt").write_text("tilde\n")
    assert call("read_file", path="~/x.txt").startswith("tilde\n")
    call("write_file", path="~user/y.txt", content="y")
    assert (ws / "~user" / "y.txt").read_text() == "y"


# --- symbolic links -------------------------------------------------------------------------


def test_link_to_outside_file(ws: Path, outside: Path, call: Call, fails: Fails) -> None:
    (ws / "leak").symlink_to(outside / "secret.txt")
    (ws / "rel_leak").symlink_to("../outside/secret.txt")
    for name in ("leak", "rel_leak"):
        assert fails("read_file", path=name).message == (
            f"path {name!r} leads outside the workspace through a symbolic link"
        )
        assert "through a symbolic link" in fails("write_file", path=name, content="x").message
        assert (
            "through a symbolic link"
            in fails("edit_file", path=name, old_string="top", new_string="x").message
        )
        assert "through a symbolic link" in fails("search_text", pattern="s", path=name).message
    assert call("search_text", pattern="secret") == "no matches for 'secret'"
    assert (
        call("list_dir")
        == "leak@\nrel_leak@\n[entries ending in @ are symbolic links (not listed into)]"
    )
    assert (ws / "leak").is_symlink()  # the link itself was not replaced either
    outside_untouched(outside)


def test_link_to_outside_directory(ws: Path, outside: Path, call: Call, fails: Fails) -> None:
    (ws / "out").symlink_to(outside)
    (ws / "a").mkdir()
    (ws / "a" / "b").symlink_to("../../outside")  # in a middle component, relative
    (ws / "abs").symlink_to(str(outside))
    for path in ("out", "out/secret.txt", "a/b", "a/b/secret.txt", "abs/secret.txt"):
        for message in refused_everywhere(fails, path):
            assert "leads outside the workspace through a symbolic link" in message, message
    assert "secret" not in call("list_dir", recursive=True)
    assert call("search_text", pattern="top secret") == "no matches for 'top secret'"
    outside_untouched(outside)


def test_dangling_link_to_outside_is_not_created(ws: Path, outside: Path, fails: Fails) -> None:
    (ws / "dangling").symlink_to("../outside/new.txt")
    (ws / "dangling_dir").symlink_to("../outside/newdir")
    assert "through a symbolic link" in fails("write_file", path="dangling", content="x").message
    assert (
        "through a symbolic link"
        in fails("write_file", path="dangling_dir/f.txt", content="x").message
    )
    outside_untouched(outside)


def test_links_inside_are_followed(ws: Path, call: Call) -> None:
    (ws / "real").mkdir()
    (ws / "real" / "f.txt").write_text("real\n")
    (ws / "top.txt").write_text("top\n")
    (ws / "rel").symlink_to("real")
    (ws / "abs").symlink_to(str(ws / "real"))
    (ws / "chain").symlink_to("rel/f.txt")
    (ws / "real" / "up").symlink_to("../top.txt")
    for path in ("rel/f.txt", "abs/f.txt", "chain", "abs/../real/f.txt"):
        assert call("read_file", path=path).startswith("real\n"), path
    assert call("read_file", path="rel/up").startswith("top\n")
    assert call("list_dir", path="rel") == "f.txt\nup@\n" + (
        "[entries ending in @ are symbolic links (not listed into)]"
    )
    assert call("search_text", pattern="real", path="rel") == "rel/f.txt:1: real"
    # writing through a link writes its target and keeps the link
    call("write_file", path="chain", content="new\n")
    assert (ws / "chain").is_symlink()
    assert (ws / "real" / "f.txt").read_text() == "new\n"
    call("edit_file", path="abs/f.txt", old_string="new", new_string="edited")
    assert (ws / "real" / "f.txt").read_text() == "edited\n"
    # a dangling link inside the workspace: the write creates its target
    (ws / "later").symlink_to("made/later.txt")
    call("write_file", path="later", content="made")
    assert (ws / "made" / "later.txt").read_text() == "made"


def test_link_loops(ws: Path, fails: Fails) -> None:
    (ws / "a").symlink_to("b")
    (ws / "b").symlink_to("a")
    (ws / "self").symlink_to("self/x")
    for path in ("a", "self", "a/x"):
        for message in refused_everywhere(fails, path):
            assert "too many levels of symbolic links" in message, message


def test_symlink_hops_are_bounded(ws: Path, call: Call, fails: Fails) -> None:
    (ws / "l0").write_text("end\n")
    for i in range(1, MAX_SYMLINK_HOPS + 2):
        (ws / f"l{i}").symlink_to(f"l{i - 1}")
    assert call("read_file", path=f"l{MAX_SYMLINK_HOPS}").startswith("end\n")
    assert "too many levels" in fails("read_file", path=f"l{MAX_SYMLINK_HOPS + 1}").message


# --- special files --------------------------------------------------------------------------


def run_with_deadline(fn: Callable[[], Any], seconds: float = 5.0) -> Any:
    """Run ``fn`` in a daemon thread; fail (instead of hanging the suite) if it blocks."""
    result: list[Any] = []

    def target() -> None:
        try:
            result.append(fn())
        except BaseException as e:
            result.append(e)

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), "the call blocked"
    return result[0]


def test_fifo_is_refused_without_hanging(ws: Path, call: Call, fails: Fails) -> None:
    os.mkfifo(ws / "pipe")
    (ws / "to_pipe").symlink_to("pipe")
    for path in ("pipe", "to_pipe"):
        error = run_with_deadline(partial(fails, "read_file", path=path))
        assert error.message == f"{path!r} is a FIFO, not a regular file or directory"
        error = run_with_deadline(partial(fails, "write_file", path=path, content="x"))
        assert "FIFO" in error.message
        edit = partial(fails, "edit_file", path=path, old_string="a", new_string="b")
        assert "FIFO" in run_with_deadline(edit).message
    assert stat.S_ISFIFO((ws / "pipe").stat().st_mode)  # not replaced by a write
    assert run_with_deadline(lambda: call("list_dir")) == (
        "pipe\nto_pipe@\n[entries ending in @ are symbolic links (not listed into)]"
    )
    assert run_with_deadline(lambda: call("search_text", pattern="x")) == "no matches for 'x'"


def test_device_is_refused(ws: Path, fails: Fails) -> None:
    try:
        os.mknod(ws / "null", stat.S_IFCHR | 0o666, os.makedev(1, 3))
    except (PermissionError, OSError):
        pytest.skip("cannot create a device node here")
    assert fails("read_file", path="null").message == (
        "'null' is a device, not a regular file or directory"
    )


# --- races ----------------------------------------------------------------------------------

OpenFn = Callable[..., int]


def swap_for_link(directory: Path, target: Path) -> None:
    """What an attacker racing the tool does: move the real directory aside and put a
    link to the outside in its place."""
    directory.rename(directory.with_name(directory.name + "_moved"))
    directory.symlink_to(target)


def hook_open(monkeypatch: pytest.MonkeyPatch, name: str, action: Callable[[], None]) -> None:
    """Run ``action`` once, just before the path layer opens ``name`` relative to a dir."""
    fired = False

    def hooked(path: str, flags: int, mode: int = 0o777, *, dir_fd: int | None = None) -> int:
        nonlocal fired
        if path == name and dir_fd is not None and not fired:
            fired = True
            action()
        return os.open(path, flags, mode, dir_fd=dir_fd)

    patch_os(monkeypatch, open=hooked)


@pytest.fixture
def tree(ws: Path) -> Path:
    (ws / "sub").mkdir()
    (ws / "sub" / "secret.txt").write_text("inside\n")
    (ws / "sub" / "f.txt").write_text("inside f\n")
    return ws / "sub"


@pytest.mark.parametrize(
    ("tool", "arguments"),
    [
        ("read_file", {"path": "sub/secret.txt"}),
        ("write_file", {"path": "sub/secret.txt", "content": "pwned"}),
        ("write_file", {"path": "sub/new.txt", "content": "pwned"}),
        ("edit_file", {"path": "sub/secret.txt", "old_string": "top", "new_string": "x"}),
        ("list_dir", {"path": "sub"}),
        ("search_text", {"pattern": "top", "path": "sub"}),
    ],
)
def test_directory_swapped_for_a_link_during_the_walk(
    tree: Path,
    outside: Path,
    fails: Fails,
    monkeypatch: pytest.MonkeyPatch,
    tool: str,
    arguments: dict[str, Any],
) -> None:
    # The swap lands after the call has started resolving the path and right before it
    # opens "sub": the O_NOFOLLOW open sees the link, which is checked and refused.
    hook_open(monkeypatch, "sub", lambda: swap_for_link(tree, tree.parent.parent / "outside"))
    error = fails(tool, **arguments)
    assert "leads outside the workspace through a symbolic link" in error.message
    outside_untouched(outside)


def test_swap_after_the_directory_was_opened_changes_nothing(
    tree: Path, outside: Path, call: Call, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The swap lands after "sub" was opened: the call goes on in the directory it holds
    # (now moved aside), never through the new link.
    swap = lambda: swap_for_link(tree, outside)  # noqa: E731
    hook_open(monkeypatch, "secret.txt", swap)
    assert call("read_file", path="sub/secret.txt").startswith("inside\n")
    outside_untouched(outside)


@pytest.mark.parametrize("tool", ["write_file", "edit_file"])
def test_swap_just_before_the_rename_changes_nothing(
    tree: Path, outside: Path, call: Call, monkeypatch: pytest.MonkeyPatch, tool: str
) -> None:
    def swap_then_rename(src: str, dst: str, **dir_fds: int) -> None:
        swap_for_link(tree, outside)
        os.rename(src, dst, **dir_fds)

    patch_os(monkeypatch, rename=swap_then_rename)
    if tool == "write_file":
        call("write_file", path="sub/f.txt", content="written\n")
    else:
        call("edit_file", path="sub/f.txt", old_string="inside f", new_string="written")
    assert (tree.with_name("sub_moved") / "f.txt").read_text() == "written\n"
    outside_untouched(outside)


def test_final_file_swapped_for_a_link_after_it_was_checked(
    ws: Path, outside: Path, fails: Fails, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Between the lstat (a regular file) and the open, the file becomes a link outside:
    # the O_NOFOLLOW open fails, the name is examined again and the link refused.
    target = ws / "f.txt"
    target.write_text("mine\n")

    def swap() -> None:
        target.unlink()
        target.symlink_to(outside / "secret.txt")

    hook_open(monkeypatch, "f.txt", swap)
    assert "through a symbolic link" in fails("read_file", path="f.txt").message
    outside_untouched(outside)


def test_search_never_enters_a_directory_swapped_during_the_walk(
    tree: Path, outside: Path, call: Call, monkeypatch: pytest.MonkeyPatch
) -> None:
    hook_open(monkeypatch, "sub", lambda: swap_for_link(tree, outside))
    assert call("search_text", pattern="top secret") == "no matches for 'top secret'"


# --- the path layer itself ------------------------------------------------------------------


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc")
def test_no_file_descriptor_leaks(ws: Path, outside: Path, call: Call, fails: Fails) -> None:
    (ws / "d" / "e").mkdir(parents=True)
    (ws / "d" / "e" / "f.txt").write_text("x\n")
    (ws / "out").symlink_to(outside)
    (ws / "loop").symlink_to("loop")
    before = open_fds()
    for _ in range(3):
        call("read_file", path="d/e/f.txt")
        call("list_dir", recursive=True)
        call("search_text", pattern="x")
        call("write_file", path="d/e/g.txt", content="y")
        call("edit_file", path="d/e/g.txt", old_string="y", new_string="z")
        call("write_file", path="d/e/g.txt", content="z", expected_sha256="absent")
        fails("read_file", path="out/secret.txt")
        fails("read_file", path="loop")
        fails("read_file", path="d/../../x")
        fails("write_file", path="d/e/g.txt", content="w", expected_sha256="absent")
    assert open_fds() == before


def test_workspace_relative_names_for_display(ws: Path) -> None:
    with Workspace(str(ws)) as w:
        assert w.relative(".") == ""
        assert w.relative("./a//b/../c/") == "a/c"
        assert w.relative(str(ws / "x" / "y")) == "x/y"
        with pytest.raises(ToolError, match="outside the workspace"):
            w.relative("/elsewhere")
