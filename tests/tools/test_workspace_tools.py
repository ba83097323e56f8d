"""Each workspace tool's behaviour: happy paths, error paths and bounds."""

from __future__ import annotations

import asyncio
import errno
import hashlib
import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest

from plait.adapters.tools import SandboxSettings, WorkspaceLimits, command_tools, workspace_tools
from plait.application.arguments import argument_errors
from plait.domain.errors import ToolError
from plait.domain.tools import EffectClass
from tests.tools.conftest import Call, Fails, patch_os, run_tool, tools_by_name


def sha(data: str | bytes) -> str:
    return hashlib.sha256(data.encode() if isinstance(data, str) else data).hexdigest()


# --- specs ----------------------------------------------------------------------------------


def test_five_tools_with_compiled_schemas_and_effects() -> None:
    tools = workspace_tools()
    assert [(t.spec.name, t.spec.effect, t.stoppable) for t in tools] == [
        ("read_file", EffectClass.READ_ONLY, True),
        ("list_dir", EffectClass.READ_ONLY, True),
        ("search_text", EffectClass.READ_ONLY, True),
        ("write_file", EffectClass.SIDE_EFFECT, False),
        ("edit_file", EffectClass.SIDE_EFFECT, False),
    ]
    for tool in tools:
        params = tool.spec.parameters
        assert params["additionalProperties"] is False
        assert all(p.get("description") for p in params["properties"].values()), tool.spec.name
        assert argument_errors(tool.spec, {"bogus": 1})  # unknown keys are refused


BUILTIN_SCHEMAS = json.loads(
    (Path(__file__).parent / "data" / "builtin_tool_schemas.json").read_text()
)


def test_specs_come_from_the_argument_models_and_match_the_hand_written_ones() -> None:
    # The schemas as they were written by hand before the argument models replaced them.
    written = BUILTIN_SCHEMAS["workspace"]
    specs = {tool.spec.name: tool.spec for tool in workspace_tools()}
    assert list(specs) == list(written)
    for name, spec in specs.items():
        assert spec.description == written[name]["description"]
        assert spec.effect == written[name]["effect"]
        assert spec.parameters == written[name]["parameters"], name


def test_command_tool_schemas_come_from_their_argument_models_unchanged() -> None:
    tools = command_tools(SandboxSettings(test_command="pytest -q"))
    schemas = {tool.spec.name: tool.spec.parameters for tool in tools}
    assert schemas == {
        "run_command": BUILTIN_SCHEMAS["run_command"],
        "run_tests": BUILTIN_SCHEMAS["run_tests"],
    }


@pytest.mark.parametrize(
    ("name", "arguments", "valid"),
    [
        ("read_file", {"path": "a", "offset_line": 2, "max_lines": 3}, True),
        ("read_file", {"path": "a", "offset_line": 0}, False),
        ("read_file", {}, False),
        ("list_dir", {}, True),
        ("list_dir", {"recursive": "yes"}, False),
        ("search_text", {"pattern": "x", "glob": "*.py", "regex": True}, True),
        ("search_text", {"pattern": ""}, False),
        ("search_text", {"pattern": "x", "max_results": 5000}, False),
        ("write_file", {"path": "a", "content": "", "expected_sha256": "absent"}, True),
        ("write_file", {"path": "a", "content": "", "expected_sha256": "A" * 64}, True),
        ("write_file", {"path": "a", "content": "", "expected_sha256": "abc"}, False),
        ("write_file", {"path": "a"}, False),
        ("edit_file", {"path": "a", "old_string": "x", "new_string": ""}, True),
        ("edit_file", {"path": "a", "old_string": "", "new_string": "y"}, False),
    ],
)
def test_schemas_accept_and_refuse(name: str, arguments: dict[str, object], valid: bool) -> None:
    spec = tools_by_name()[name].spec
    assert (argument_errors(spec, arguments) == []) is valid


def test_no_workspace_is_a_tool_error() -> None:
    for tool in workspace_tools():
        with pytest.raises(ToolError, match="this session has no workspace"):
            run_tool(tool, None, path="a", pattern="a", content="", old_string="a", new_string="")


def test_missing_workspace_does_not_leak_its_path(tmp_path: Path) -> None:
    with pytest.raises(ToolError) as info:
        run_tool(tools_by_name()["read_file"], tmp_path / "gone", path="a")
    assert info.value.message == "the session's workspace is not available"


def test_executors_parse_their_arguments_into_the_declared_types(fails: Fails) -> None:
    # A stored call was checked against the schema before it was stored; an executor called
    # directly still refuses what its arguments model refuses, naming the argument.
    def message(name: str, **arguments: Any) -> str:
        return fails(name, **arguments).message.removeprefix("invalid arguments: ")

    assert message("read_file", path=3) == "$.path: Input should be a valid string"
    assert message("read_file", path="a", offset_line="x") == (
        "$.offset_line: Input should be a valid integer, unable to parse string as an integer"
    )
    assert message("read_file", path="a", max_lines=0) == (
        "$.max_lines: Input should be greater than or equal to 1"
    )
    assert message("write_file", path="a") == "$.content: Field required"
    assert message("read_file", path="") == "$.path: String should have at least 1 character"
    assert message("list_dir", bogus=1) == "$.bogus: Extra inputs are not permitted"
    assert "NUL" in fails("read_file", path="a\0b").message


# --- read_file ------------------------------------------------------------------------------


def test_read_whole_file(ws: Path, call: Call) -> None:
    (ws / "a.txt").write_text("one\ntwo\n")
    digest = sha("one\ntwo\n")
    assert call("read_file", path="a.txt") == f"one\ntwo\n[end of file; 2 lines; sha256 {digest}]"


def test_read_empty_file_and_missing_newline(ws: Path, call: Call) -> None:
    (ws / "empty").write_bytes(b"")
    (ws / "nonl").write_bytes(b"x")
    assert call("read_file", path="empty") == f"[empty file; sha256 {sha('')}]"
    assert call("read_file", path="nonl") == (
        f"x\n[end of file; 1 line; no newline at end of file; sha256 {sha('x')}]"
    )


def test_read_line_ranges(ws: Path, call: Call, fails: Fails) -> None:
    text = "".join(f"l{i}\n" for i in range(1, 11))
    (ws / "n.txt").write_text(text)
    assert call("read_file", path="n.txt", offset_line=3, max_lines=2) == (
        "l3\nl4\n[lines 3-4; more follows; continue with offset_line=5]"
    )
    assert call("read_file", path="n.txt", offset_line=9) == (
        f"l9\nl10\n[end of file; lines 9-10 of 10; sha256 {sha(text)}]"
    )
    assert call("read_file", path="n.txt", max_lines=10) == (
        f"{text}[end of file; 10 lines; sha256 {sha(text)}]"
    )
    assert "past the end" in fails("read_file", path="n.txt", offset_line=11).message


def test_read_unicode_and_undecodable_bytes(ws: Path, call: Call) -> None:
    (ws / "u.txt").write_text("héllo 🌍\n", encoding="utf-8")
    assert call("read_file", path="u.txt").startswith("héllo 🌍\n[end of file; 1 line;")
    (ws / "latin1.txt").write_bytes(b"caf\xe9\n")
    out = call("read_file", path="latin1.txt")
    assert out.startswith("caf\ufffd\n[")
    assert "undecodable bytes are shown as U+FFFD" in out


def test_read_binary_directory_and_missing(ws: Path, fails: Fails) -> None:
    (ws / "bin").write_bytes(b"\x7fELF\x00\x01\x02")
    (ws / "d").mkdir()
    assert fails("read_file", path="bin").message == "'bin' is a binary file"
    assert "is a directory; use list_dir" in fails("read_file", path="d").message
    assert fails("read_file", path="nope.txt").message == "'nope.txt' does not exist"
    assert "no directory 'x'" in fails("read_file", path="x/y.txt").message
    (ws / "f").write_text("x")
    assert "'f' is not a directory" in fails("read_file", path="f/y").message


def test_read_large_file_is_bounded(ws: Path, call: Call) -> None:
    line = "x" * 99 + "\n"
    (ws / "big.txt").write_text(line * 30_000)  # 3 MB, over the 2 MiB default
    out = call("read_file", path="big.txt")
    body, note = out.rsplit("\n[", 1)
    assert len(body.encode()) <= 2 * 1024 * 1024
    assert body.endswith("x")
    assert note == (
        "lines 1-20971; stopped at the 2097152-byte limit; continue with offset_line=20972]"
    )
    rest = call("read_file", path="big.txt", offset_line=20972, max_lines=1)
    assert rest == line + "[lines 20972-20972; more follows; continue with offset_line=20973]"


def test_read_one_huge_line_is_cut_on_a_character_boundary(ws: Path) -> None:
    (ws / "wide.txt").write_text("é" * 600 + "\nnext\n")  # 1200 bytes on line 1
    tool = tools_by_name(WorkspaceLimits(max_read_bytes=101))["read_file"]
    out = run_tool(tool, ws, path="wide.txt")
    assert out == (
        "é" * 50 + "\n[lines 1-1; stopped at the 101-byte limit inside line 1, which is cut "
        "short; continue with offset_line=2]"
    )


def test_read_skipping_is_bounded_too(ws: Path) -> None:
    (ws / "long.txt").write_text("x\n" * 1000)
    tool = tools_by_name(WorkspaceLimits(max_scan_bytes=100))["read_file"]
    with pytest.raises(ToolError, match="too far into"):
        run_tool(tool, ws, path="long.txt", offset_line=900)


# --- list_dir -------------------------------------------------------------------------------


def make_tree(ws: Path) -> None:
    (ws / "b.txt").write_text("b")
    (ws / "a").mkdir()
    (ws / "a" / "z.py").write_text("z")
    (ws / "a" / "deep").mkdir()
    (ws / "a" / "deep" / "x").write_text("x")
    (ws / ".git").mkdir()
    (ws / ".git" / "HEAD").write_text("ref")
    (ws / "link").symlink_to("a")


def test_list_dir(ws: Path, call: Call, fails: Fails) -> None:
    make_tree(ws)
    assert call("list_dir") == (
        ".git/\na/\nb.txt\nlink@\n[entries ending in @ are symbolic links (not listed into)]"
    )
    assert call("list_dir", path="a") == "deep/\nz.py"
    assert call("list_dir", path="link") == "deep/\nz.py"  # an in-workspace link is followed
    assert call("list_dir", path="a/deep/..") == "deep/\nz.py"
    (ws / "empty").mkdir()
    assert call("list_dir", path="empty") == "(empty directory)"
    assert "is a file; use read_file" in fails("list_dir", path="b.txt").message
    assert "does not exist" in fails("list_dir", path="nope").message


def test_list_dir_recursive_skips_git_and_links(ws: Path, call: Call) -> None:
    make_tree(ws)
    assert call("list_dir", recursive=True) == (
        ".git/\na/\na/deep/\na/deep/x\na/z.py\nb.txt\nlink@\n"
        "[entries ending in @ are symbolic links (not listed into)]\n"
        "[.git is not listed into]"
    )


def test_list_dir_is_bounded(ws: Path) -> None:
    for i in range(30):
        (ws / f"f{i:02}").write_text("")
    tool = tools_by_name(WorkspaceLimits(max_list_entries=5))["list_dir"]
    assert run_tool(tool, ws) == (
        "f00\nf01\nf02\nf03\nf04\n[stopped after 5 entries; list a subdirectory for more]"
    )
    # a huge directory: only some names are read (in directory order), and it says so
    tool = tools_by_name(WorkspaceLimits(max_dir_entries=3))["list_dir"]
    lines = run_tool(tool, ws).split("\n")
    assert len(lines) == 4
    assert lines == [*sorted(lines[:3]), "[too many entries, only some read in: .]"]


def test_list_dir_depth_is_bounded(ws: Path) -> None:
    (ws / "d1" / "d2" / "d3").mkdir(parents=True)
    tool = tools_by_name(WorkspaceLimits(max_depth=2))["list_dir"]
    assert run_tool(tool, ws, recursive=True) == (
        "d1/\nd1/d2/\n[nested too deep, not entered: d1/d2]"
    )


# --- search_text ----------------------------------------------------------------------------


def test_search_text(ws: Path, call: Call) -> None:
    make_tree(ws)
    (ws / "a" / "z.py").write_text("def f():\n    return 42\n# TODO: x\n")
    (ws / "b.txt").write_text("todo later\nTODO now\n")
    (ws / ".git" / "HEAD").write_text("TODO in git\n")
    (ws / "blob.bin").write_bytes(b"TODO\x00\x01")
    assert call("search_text", pattern="TODO") == (
        "a/z.py:3: # TODO: x\nb.txt:2: TODO now\n[skipped 1 binary file]"
    )
    assert call("search_text", pattern="todo", ignore_case=True, glob="*.txt") == (
        "b.txt:1: todo later\nb.txt:2: TODO now"
    )
    assert call("search_text", pattern=r"return \d+", regex=True, path="a") == (
        "a/z.py:2:     return 42"
    )
    assert call("search_text", pattern="TODO", path="./a/../b.txt") == "b.txt:2: TODO now"
    assert call("search_text", pattern="TODO", glob="a/*") == "a/z.py:3: # TODO: x"
    assert call("search_text", pattern="nothing here") == (
        "no matches for 'nothing here'\n[skipped 1 binary file]"
    )


def test_search_errors(ws: Path, fails: Fails) -> None:
    assert "invalid regular expression" in fails("search_text", pattern="(", regex=True).message
    assert "does not exist" in fails("search_text", pattern="x", path="nope").message


def test_search_unicode_and_long_lines(ws: Path, call: Call) -> None:
    (ws / "u.txt").write_text("naïve café\n" + "y" * 200_000 + "café\n", encoding="utf-8")
    out = call("search_text", pattern="café")
    first, second = out.split("\n")
    assert first == "u.txt:1: naïve café"
    assert second == "u.txt:2: " + "y" * 300 + "…"  # reported once, shown cut short


def test_search_is_bounded(ws: Path, call: Call) -> None:
    (ws / "many.txt").write_text("hit\n" * 50)
    assert call("search_text", pattern="hit", max_results=3) == (
        "many.txt:1: hit\nmany.txt:2: hit\nmany.txt:3: hit\n"
        "[stopped after 3 matches; narrow the search for more]"
    )
    tool = tools_by_name(WorkspaceLimits(max_scan_bytes=10))["search_text"]
    assert run_tool(tool, ws, pattern="hit") == (
        "many.txt:1: hit\nmany.txt:2: hit\n[stopped after searching 10 bytes]"
    )


# --- write_file -----------------------------------------------------------------------------


def test_write_creates_with_parents_and_overwrites(ws: Path, call: Call) -> None:
    content = "print('héllo')\n"
    size = len(content.encode())
    assert call("write_file", path="new/dir/x.py", content=content) == (
        f"created 'new/dir/x.py': {size} bytes written; sha256 {sha(content)}"
    )
    assert (ws / "new" / "dir" / "x.py").read_text() == content
    assert call("write_file", path="new/dir/x.py", content="") == (
        f"overwrote 'new/dir/x.py': 0 bytes written; sha256 {sha('')}"
    )
    assert (ws / "new" / "dir" / "x.py").read_text() == ""
    assert [p.name for p in (ws / "new" / "dir").iterdir()] == ["x.py"]  # no temp file left


def test_write_keeps_the_file_mode(ws: Path, call: Call) -> None:
    script = ws / "run.sh"
    script.write_text("#!/bin/sh\n")
    script.chmod(0o755)
    call("write_file", path="run.sh", content="#!/bin/sh\necho hi\n")
    assert stat.S_IMODE(script.stat().st_mode) == 0o755


def test_write_errors(ws: Path, fails: Fails) -> None:
    (ws / "d").mkdir()
    assert "is a directory" in fails("write_file", path="d", content="x").message
    assert "is a directory" in fails("write_file", path=".", content="x").message
    assert "not valid Unicode" in fails("write_file", path="s", content="\ud800").message
    assert not (ws / "s").exists()


def test_compare_and_write(ws: Path, call: Call, fails: Fails) -> None:
    target = ws / "f.txt"
    # "absent": create only if missing
    assert call("write_file", path="f.txt", content="v1", expected_sha256="absent").startswith(
        "created 'f.txt'"
    )
    # matching sha: written
    out = call("write_file", path="f.txt", content="v2", expected_sha256=sha("v1"))
    assert out == f"overwrote 'f.txt': 2 bytes written; sha256 {sha('v2')}"
    # the same call retried: the file already holds it, nothing is written
    inode = target.stat().st_ino
    out = call("write_file", path="f.txt", content="v2", expected_sha256=sha("v1"))
    assert out == f"already written: 'f.txt' holds this content; sha256 {sha('v2')}"
    assert target.stat().st_ino == inode
    # a create retried after it succeeded
    out = call("write_file", path="f.txt", content="v2", expected_sha256="absent")
    assert out.startswith("already written")
    # mismatch: nothing written, the current sha reported
    error = fails("write_file", path="f.txt", content="v3", expected_sha256=sha("v1"))
    assert error.message == (
        f"'f.txt' was expected sha256 {sha('v1')}, but its sha256 is {sha('v2')}; "
        "nothing was written"
    )
    assert error.details["current_sha256"] == sha("v2")
    error = fails("write_file", path="f.txt", content="v3", expected_sha256="absent")
    assert "expected not to exist, but its sha256 is" in error.message
    assert target.read_text() == "v2"
    # an upper-case or prefixed sha is accepted
    out = call("write_file", path="f.txt", content="v3", expected_sha256="sha256:" + sha("v2"))
    assert out.startswith("overwrote")
    # expecting content where there is no file
    error = fails(
        "write_file", path="g.txt", content="x", expected_sha256=sha("x").upper()[:63] + "0"
    )
    assert "it does not exist" in error.message
    error = fails("write_file", path="no/dir/g.txt", content="x", expected_sha256=sha("y"))
    assert "does not exist" in error.message
    assert not (ws / "no").exists()  # no directories created for a refused write
    assert fails("write_file", path="f.txt", content="x", expected_sha256="nope").message == (
        "invalid arguments: $.expected_sha256: String should match pattern "
        "'^((sha256:)?[0-9a-fA-F]{64}|absent)$'"
    )


def write_meanwhile(
    monkeypatch: pytest.MonkeyPatch, target: Path, text: str, **overrides: Any
) -> None:
    """Another writer changes ``target`` right after the tool opened its temporary file."""

    def open_then_change(
        path: str, flags: int, mode: int = 0o777, *, dir_fd: int | None = None
    ) -> int:
        fd = os.open(path, flags, mode, dir_fd=dir_fd)
        if path.startswith(".plait-"):
            target.write_text(text)
        return fd

    patch_os(monkeypatch, open=open_then_change, **overrides)


def test_compare_and_write_refuses_a_change_made_during_the_write(
    ws: Path, fails: Fails, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = ws / "f.txt"
    target.write_text("v1")
    write_meanwhile(monkeypatch, target, "other")
    error = fails("write_file", path="f.txt", content="v2", expected_sha256=sha("v1"))
    assert "changed while it was being written" in error.message
    assert target.read_text() == "other"
    assert sorted(p.name for p in ws.iterdir()) == ["f.txt"]  # temp file removed


def test_create_if_absent_is_atomic(
    ws: Path, fails: Fails, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The other writer lands after every check, just before the final step: the hard
    # link that publishes the new file fails because the name exists, so theirs is kept.
    target = ws / "f.txt"

    def create_then_link(*args: Any, **kwargs: Any) -> None:
        target.write_text("theirs")
        os.link(*args, **kwargs)

    patch_os(monkeypatch, link=create_then_link)
    error = fails("write_file", path="f.txt", content="mine", expected_sha256="absent")
    assert "changed while it was being written" in error.message
    assert target.read_text() == "theirs"
    assert sorted(p.name for p in ws.iterdir()) == ["f.txt"]


def test_create_if_absent_without_hard_links(
    ws: Path, call: Call, fails: Fails, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_link(*args: Any, **kwargs: Any) -> None:
        raise PermissionError(errno.EPERM, "Operation not permitted")

    patch_os(monkeypatch, link=no_link)
    out = call("write_file", path="a.txt", content="a", expected_sha256="absent")
    assert out.startswith("created")
    assert (ws / "a.txt").read_text() == "a"
    # the fallback compares the state just before the rename
    target = ws / "f.txt"
    write_meanwhile(monkeypatch, target, "theirs", link=no_link)
    error = fails("write_file", path="f.txt", content="mine", expected_sha256="absent")
    assert "changed while it was being written" in error.message
    assert target.read_text() == "theirs"
    assert sorted(p.name for p in ws.iterdir()) == ["a.txt", "f.txt"]


# --- edit_file ------------------------------------------------------------------------------


def test_edit_file(ws: Path, call: Call) -> None:
    (ws / "m.py").write_text("a = 1\nb = 2\n")
    out = call("edit_file", path="m.py", old_string="b = 2", new_string="b = 3")
    assert (
        out == f"edited 'm.py': 1 replacement; sha256 {sha(chr(10).join(['a = 1', 'b = 3', '']))}"
    )
    assert (ws / "m.py").read_text() == "a = 1\nb = 3\n"
    call("edit_file", path="m.py", old_string="a = 1\n", new_string="")
    assert (ws / "m.py").read_text() == "b = 3\n"


def test_edit_unicode(ws: Path, call: Call) -> None:
    (ws / "u.txt").write_text("Grüße, 世界 🌍\n", encoding="utf-8")
    call("edit_file", path="u.txt", old_string="世界 🌍", new_string="мир")
    assert (ws / "u.txt").read_text(encoding="utf-8") == "Grüße, мир\n"


def test_edit_ambiguity_and_replace_all(ws: Path, call: Call, fails: Fails) -> None:
    (ws / "r.txt").write_text("x x x\n")
    error = fails("edit_file", path="r.txt", old_string="x", new_string="y")
    assert error.message.startswith("old_string occurs 3 times in 'r.txt'")
    assert error.details["occurrences"] == 3
    assert (ws / "r.txt").read_text() == "x x x\n"
    out = call("edit_file", path="r.txt", old_string="x", new_string="y", replace_all=True)
    assert out.startswith("edited 'r.txt': 3 replacements;")
    assert (ws / "r.txt").read_text() == "y y y\n"


def test_edit_errors(ws: Path, fails: Fails) -> None:
    (ws / "r.txt").write_text("abc\n")
    (ws / "bin").write_bytes(b"a\x00b")
    (ws / "latin1").write_bytes(b"caf\xe9")
    assert (
        "was not found in 'r.txt'"
        in fails("edit_file", path="r.txt", old_string="zzz", new_string="y").message
    )
    assert "identical" in fails("edit_file", path="r.txt", old_string="a", new_string="a").message
    assert (
        "does not exist"
        in fails("edit_file", path="no.txt", old_string="a", new_string="b").message
    )
    assert "binary" in fails("edit_file", path="bin", old_string="a", new_string="c").message
    assert (
        "not valid UTF-8"
        in fails("edit_file", path="latin1", old_string="caf", new_string="x").message
    )
    assert (ws / "r.txt").read_text() == "abc\n"


def test_edit_size_is_bounded(ws: Path) -> None:
    (ws / "big").write_text("a" * 200)
    tool = tools_by_name(WorkspaceLimits(max_edit_bytes=100))["edit_file"]
    with pytest.raises(ToolError, match="larger than 100 bytes"):
        run_tool(tool, ws, path="big", old_string="a", new_string="b")


def test_tools_run_in_a_thread_without_blocking_the_loop(ws: Path) -> None:
    (ws / "a.txt").write_text("a\n")
    tools = tools_by_name()

    async def both() -> list[str]:
        from plait.application.ports import ToolInvocation
        from plait.domain.messages import ToolCall

        def inv(name: str, **args: object) -> ToolInvocation:
            return ToolInvocation(
                call=ToolCall.create(id=f"c_{name}", name=name, arguments=dict(args)),
                session_id="s",
                run_id="r",
                workspace=str(ws),
                idempotency_key=name,
            )

        outs = await asyncio.gather(
            tools["read_file"].execute(inv("read_file", path="a.txt")),
            tools["list_dir"].execute(inv("list_dir")),
        )
        return [o.content for o in outs]

    read, listed = asyncio.run(both())
    assert read.startswith("a\n[end of file")
    assert listed == "a.txt"
