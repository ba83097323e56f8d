"""The escape attempts of the sandbox suite, made through the file tools, which do not
run under bubblewrap and keep their own defences (every path walked from a directory fd
of the workspace, links leading out refused, writes by rename). The symlink-swap races
are driven deterministically by hooking the path layer's ``os.open``."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from plait.adapters.tools import workspace_tools
from plait.domain.errors import ToolError
from tests.sandbox.conftest import SECRET, execute, snapshot
from tests.tools.conftest import patch_os

Tools = Callable[..., str]


@pytest.fixture
def call(ws: Path) -> Tools:
    tools = {t.spec.name: t for t in workspace_tools()}

    def go(name: str, **args: Any) -> str:
        output = execute(tools[name], ws, **args)
        assert not output.failed
        return output.content

    return go


@pytest.fixture
def untouched(tmp_path: Path, ws: Path, outside: Path) -> Any:
    before = {k: v for k, v in snapshot(tmp_path).items() if not k.startswith("ws")}
    yield
    assert {k: v for k, v in snapshot(tmp_path).items() if not k.startswith("ws")} == before


def refused(call: Tools, name: str, **args: Any) -> str:
    with pytest.raises(ToolError) as caught:
        call(name, **args)
    return caught.value.message


@pytest.mark.usefixtures("untouched")
def test_reading_outside_is_refused(call: Tools, outside: Path) -> None:
    for path in ("/etc/shadow", str(outside / "secret.txt"), "../outside/secret.txt"):
        assert "outside the workspace" in refused(call, "read_file", path=path)
    home = str(Path.home() / ".bashrc")
    assert "outside the workspace" in refused(call, "read_file", path=home)


@pytest.mark.usefixtures("untouched")
@pytest.mark.parametrize("path", ["{outside}/new.txt", "../outside/secret.txt", "/etc/x"])
def test_writing_outside_is_refused(call: Tools, outside: Path, path: str) -> None:
    target = path.format(outside=outside)
    assert "outside the workspace" in refused(call, "write_file", path=target, content="x")


@pytest.mark.usefixtures("untouched")
def test_planted_symlinks_are_refused(call: Tools, ws: Path, outside: Path) -> None:
    (ws / "to-file").symlink_to(outside / "secret.txt")
    (ws / "to-dir").symlink_to(outside)
    attempts = [
        ("read_file", {"path": "to-file"}),
        ("write_file", {"path": "to-file", "content": "pwned"}),
        ("edit_file", {"path": "to-file", "old_string": "host", "new_string": "x"}),
        ("write_file", {"path": "to-dir/new.txt", "content": "pwned"}),
        ("list_dir", {"path": "to-dir"}),
    ]
    for name, args in attempts:
        assert "through a symbolic link" in refused(call, name, **args)


@pytest.mark.usefixtures("untouched")
@pytest.mark.parametrize("how", ["write_file", "edit_file"])
def test_a_hard_link_to_an_outside_file_is_replaced_not_written_through(
    call: Tools, ws: Path, outside: Path, how: str
) -> None:
    # Someone planted a hard link to an outside file (nothing in the sandbox can: a link
    # across its mounts fails). A write replaces the workspace's name by rename; the
    # outside file keeps its content.
    os.link(outside / "secret.txt", ws / "linked.txt")
    if how == "write_file":
        call("write_file", path="linked.txt", content="mine\n")
    else:
        call("edit_file", path="linked.txt", old_string="host secret", new_string="mine")
    assert (outside / "secret.txt").read_text() == SECRET
    assert (ws / "linked.txt").stat().st_nlink == 1


def _hook_open(monkeypatch: pytest.MonkeyPatch, name: str, action: Callable[[], None]) -> None:
    fired = False

    def hooked(path: str, flags: int, mode: int = 0o777, *, dir_fd: int | None = None) -> int:
        nonlocal fired
        if path == name and dir_fd is not None and not fired:
            fired = True
            action()
        return os.open(path, flags, mode, dir_fd=dir_fd)

    patch_os(monkeypatch, open=hooked)


@pytest.mark.usefixtures("untouched")
@pytest.mark.parametrize(
    ("name", "args"),
    [
        ("read_file", {"path": "sub/secret.txt"}),
        ("write_file", {"path": "sub/secret.txt", "content": "pwned"}),
        ("edit_file", {"path": "sub/secret.txt", "old_string": "host", "new_string": "x"}),
    ],
)
def test_symlink_swap_race_is_refused(
    call: Tools,
    ws: Path,
    outside: Path,
    monkeypatch: pytest.MonkeyPatch,
    name: str,
    args: dict[str, Any],
) -> None:
    sub = ws / "sub"
    sub.mkdir()
    (sub / "secret.txt").write_text("inside\n")

    def swap() -> None:  # lands between the call's start and its open of "sub"
        sub.rename(ws / "sub_moved")
        sub.symlink_to(outside)

    _hook_open(monkeypatch, "sub", swap)
    assert "through a symbolic link" in refused(call, name, **args)
    assert (ws / "sub_moved" / "secret.txt").read_text() == "inside\n"
