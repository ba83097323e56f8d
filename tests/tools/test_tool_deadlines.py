"""The file tools run in worker threads, which cannot be killed: they stop by themselves at
their deadline (the runner's time limit, or their caller giving up), and search_text's
regular expressions cannot backtrack."""

from __future__ import annotations

import asyncio
import hashlib
import os
import random
import re
import threading
from pathlib import Path
from typing import Any

import pytest

from plait.adapters.tools import WorkspaceLimits
from plait.adapters.tools import probe as probe_module
from plait.adapters.tools._deadline import CallStopped, Deadline
from plait.adapters.tools._guard import Guard
from plait.adapters.tools._match import MAX_PROGRAM_SIZE
from plait.adapters.tools._paths import Workspace
from plait.adapters.tools._search import search_text
from plait.adapters.tools._specs import EditFile, ListDir, ReadFile, SearchText, WriteFile
from plait.adapters.tools.probe import FileProbe
from plait.adapters.tools.workspace import _edit_file, _list_dir, _read_file, _write_file
from plait.application.ports import ToolInvocation
from plait.application.typed_tools import ToolArguments
from plait.domain.messages import ToolCall
from tests.tools.conftest import Call, Fails, tools_by_name


class CountdownDeadline(Deadline):
    """Passes after ``checks`` questions: a deadline that falls at a chosen point."""

    def __init__(self, checks: int) -> None:
        super().__init__(None, cap=3600)
        self.left_checks = checks

    def passed(self) -> bool:
        self.left_checks -= 1
        return self.left_checks < 0


_MODELS: dict[Any, type[ToolArguments]] = {
    _read_file: ReadFile,
    _list_dir: ListDir,
    search_text: SearchText,
    _write_file: WriteFile,
    _edit_file: EditFile,
}


def _in(ws: Path, fn: Any, deadline: Deadline, **args: Any) -> str:
    with Workspace(str(ws), guard=Guard(())) as w:
        result = fn(w, _MODELS[fn](**args), WorkspaceLimits(), deadline)
        assert isinstance(result, str)
        return result


def test_catastrophic_patterns_do_not_backtrack(ws: Path, call: Call) -> None:
    # Python's re needs longer than the universe's age for this line (and holds the GIL).
    (ws / "a.txt").write_text("a" * 60_000 + "b\nxaaa\n")
    assert call("search_text", pattern="(a+)+$", regex=True) == "a.txt:2: xaaa"
    assert call("search_text", pattern="(x+x+)+y", regex=True) == "no matches for '(x+x+)+y'"


def test_regex_syntax_errors_name_the_problem_and_the_dialect(ws: Path, fails: Fails) -> None:
    (ws / "a.txt").write_text("ab\n")
    error = fails("search_text", pattern=r"(?<=a)b", regex=True)
    assert error.message.startswith("invalid regular expression: invalid perl operator: (?<=")
    assert "without lookaround and backreferences" in error.message
    assert error.details == {"pattern": r"(?<=a)b"}
    assert (
        "invalid regular expression" in fails("search_text", pattern=r"(a)\1", regex=True).message
    )


def test_too_complex_patterns_are_refused_with_the_fix(ws: Path, call: Call, fails: Fails) -> None:
    (ws / "a.txt").write_text("héllo wörld\n")
    message = fails("search_text", pattern=r"\pL{1,100}", regex=True).message
    assert message.startswith("regular expression too complex (")
    assert f"at most {MAX_PROGRAM_SIZE}" in message and "'+' instead of '{1,100}'" in message
    assert call("search_text", pattern=r"\pL+ w", regex=True) == "a.txt:1: héllo wörld"
    assert call("search_text", pattern=r"HÉLLO", regex=True, ignore_case=True) == (
        "a.txt:1: héllo wörld"
    )


def test_a_search_stops_at_its_deadline_with_what_it_found(ws: Path) -> None:
    (ws / "a.txt").write_text("hit 1\nhit 2\nhit 3\nhit 4\n")
    (ws / "b.txt").write_text("hit 5\n")
    # checks: the entry a.txt, its block (which may match), then each line before matching
    out = _in(ws, search_text, CountdownDeadline(1 + 1 + 2), pattern="hit")
    assert out == (
        "a.txt:1: hit 1\na.txt:2: hit 2\n"
        "[search_text stopped at its time limit of 3600 s; narrow the search]"
    )
    stopped = Deadline(10, cap=60)
    stopped.stop()
    assert _in(ws, search_text, stopped, pattern="hit", path="a.txt") == (
        "no matches for 'hit'\n"
        "[search_text was stopped: its caller stopped waiting for it; narrow the search]"
    )


def test_reading_and_listing_stop_at_their_deadline(ws: Path) -> None:
    for i in range(5):
        (ws / f"f{i}").write_text("line\n" * 10)
    with pytest.raises(CallStopped, match="list_dir stopped at its time limit"):
        _in(ws, _list_dir, CountdownDeadline(3))
    with pytest.raises(CallStopped, match="read_file stopped at its time limit"):
        _in(ws, _read_file, CountdownDeadline(4), path="f0", offset_line=9)
    # within the deadline both work as before
    assert _in(ws, _read_file, CountdownDeadline(9), path="f0", offset_line=10).startswith("line")


def test_a_write_whose_caller_gave_up_writes_nothing(ws: Path) -> None:
    (ws / "a.txt").write_text("old\n")
    gone = Deadline(10, cap=60)
    gone.stop()
    with pytest.raises(CallStopped, match="write_file was stopped"):
        _in(ws, _write_file, gone, path="a.txt", content="new\n")
    with pytest.raises(CallStopped, match="edit_file was stopped"):
        _in(ws, _edit_file, gone, path="a.txt", old_string="old", new_string="new")
    assert (ws / "a.txt").read_text() == "old\n"
    assert sorted(p.name for p in ws.iterdir()) == ["a.txt"]  # no temporary file left


def test_the_time_limit_of_the_invocation_bounds_the_thread(ws: Path) -> None:
    assert Deadline(2.5, cap=600).seconds == 2.5
    assert Deadline(None, cap=600).seconds == 600  # no limit from the run: still bounded
    assert Deadline(900, cap=600).seconds == 600
    (ws / "a.txt").write_text("x\n")
    tool = tools_by_name(WorkspaceLimits(max_call_seconds=1))["search_text"]
    invocation = ToolInvocation(
        call=ToolCall.create(id="c1", name="search_text", arguments={"pattern": "x"}),
        session_id="ses_1",
        run_id="run_1",
        workspace=str(ws),
        idempotency_key="k",
        time_limit_seconds=30,
    )
    assert asyncio.run(tool.execute(invocation)).content == "a.txt:1: x"


def test_cancelling_a_reading_tool_stops_its_thread(ws: Path) -> None:
    """The executor's await is cancelled (a timeout or the run's cancellation): the thread
    is told, and stops at its next check instead of reading on."""
    (ws / "a.txt").write_text("x\n")
    cancelled = threading.Event()
    answers: list[bool] = []
    original = Deadline.passed

    def spy(self: Deadline) -> bool:  # the thread's first check waits for the cancel
        cancelled.wait(60)
        answers.append(original(self))
        return answers[-1]

    tool = tools_by_name()["search_text"]
    invocation = ToolInvocation(
        call=ToolCall.create(id="c1", name="search_text", arguments={"pattern": "x"}),
        session_id="ses_1",
        run_id="run_1",
        workspace=str(ws),
        idempotency_key="k",
    )

    async def main() -> None:
        task = asyncio.create_task(tool.execute(invocation))
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        cancelled.set()

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(Deadline, "passed", spy)
        asyncio.run(main())  # waits for the thread to end
    assert answers == [True]  # its deadline is far off: only the cancel can stop it


@pytest.mark.parametrize(
    "pattern",
    ["ab", "^a", "b$", "a.b", "^$", r"a\sb", "[^a]b$", r"\bab\b", "(?i)AB", r"\Ab", r"b\z"],
)
@pytest.mark.parametrize("ending", ["\n", "\r\n"])
def test_block_matching_finds_exactly_the_matching_lines(
    ws: Path, call: Call, pattern: str, ending: str
) -> None:
    """Blocks of lines are matched at once and only a block that may match is searched
    line by line: the result is the same as matching each line alone (Python's re as the
    reference, on patterns both engines read alike)."""
    rng = random.Random(pattern + ending)
    lines = ["".join(rng.choice("ab \r") for _ in range(rng.randrange(0, 8))) for _ in range(6000)]
    (ws / "t.txt").write_bytes(ending.join(lines).encode())
    expected = [
        f"t.txt:{n}: {text}"
        for n, line in enumerate(lines, 1)
        if re.search(pattern.replace(r"\z", r"\Z"), text := line.rstrip("\r\n"))
    ][:1000]
    out = call("search_text", pattern=pattern, regex=True, max_results=1000)
    found = [line for line in out.split("\n") if not line.startswith("[")]
    assert found == (expected or [f"no matches for {pattern!r}"])


def test_a_long_line_is_reported_once_wherever_it_matches(ws: Path, call: Call) -> None:
    (ws / "long.txt").write_text("x" * 100_000 + "needle\nneedle\n" + "y" * 70_000 + "\n")
    assert call("search_text", pattern="needle$", regex=True) == (
        "long.txt:1: " + "x" * 300 + "…\nlong.txt:2: needle"
    )
    assert call("search_text", pattern="NEEDLE", ignore_case=True) == (
        "long.txt:1: " + "x" * 300 + "…\nlong.txt:2: needle"
    )


def test_the_approval_probe_returns_promptly_on_fifos_and_huge_files(
    ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The gate digests the files a call touches before it runs, on the event loop: a FIFO
    must not wait for a writer, a huge file must not be read whole."""
    os.mkfifo(ws / "pipe")
    (ws / "a.txt").write_text("abc")
    probe = FileProbe()
    fifo = probe.state(str(ws), ("pipe",))  # would block forever if opened for reading
    assert fifo is not None and fifo != probe.state(str(ws), ("a.txt",))
    plain = probe.state(str(ws), ("a.txt",))
    h = hashlib.sha256(b"a.txt\0abc\0file\0")
    assert plain == "sha256:" + h.hexdigest()  # unchanged for files within the bound
    monkeypatch.setattr(probe_module, "MAX_HASHED_BYTES", 2)
    (ws / "big.txt").write_text("abcdef")
    first = probe.state(str(ws), ("big.txt",))
    (ws / "big.txt").write_text("abXXXX")  # beyond the hashed head: size and mtime decide
    os.utime(ws / "big.txt", ns=(1, 1))
    assert probe.state(str(ws), ("big.txt",)) != first
