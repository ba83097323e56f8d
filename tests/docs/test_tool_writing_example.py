"""docs/python-api.md's "Writing your own tools" example runs as written and its tool stops
when its await is cancelled."""

from __future__ import annotations

import asyncio
import hashlib
import re
from pathlib import Path
from typing import Any

import pytest

from plait.application.ports import ToolInvocation
from plait.domain.messages import ToolCall

README = Path(__file__).parents[2] / "docs" / "python-api.md"


def _examples() -> list[str]:
    section = README.read_text().split("### Writing your own tools", 1)[1].split("\n## ", 1)[0]
    return [str(code) for code in re.findall(r"```python\n(.*?)```", section, re.DOTALL)]


def _example() -> str:
    return _examples()[1]


def test_the_decorator_example_runs_and_shows_its_schema(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code = _examples()[0]
    scope: dict[str, Any] = {"__name__": "readme"}
    exec(compile(code, str(README), "exec"), scope)
    printed = capsys.readouterr().out
    shown = code.rsplit("# ", 1)[1]
    assert printed == shown  # the comment is the output
    tool = scope["count_words"]
    assert tool.spec.effect == "read_only"
    assert tool.spec.description == "Count the words of a text."
    invocation = ToolInvocation(
        call=ToolCall.create(id="c", name="count_words", arguments={"text": "a bb ccc"}),
        session_id="s",
        run_id="r",
        workspace=None,
        idempotency_key="k",
    )
    assert asyncio.run(tool.execute(invocation)).content == "3"


def test_the_example_runs(capsys: pytest.CaptureFixture[str]) -> None:
    exec(compile(_example(), str(README), "exec"), {"__name__": "readme"})
    assert capsys.readouterr().out == hashlib.sha256(b"hello\n").hexdigest() + "\n"


def test_the_example_tool_stops_its_thread_when_cancelled(tmp_path: Path) -> None:
    scope: dict[str, Any] = {"__name__": "readme"}
    code = _example()
    exec(compile(code[: code.index("with tempfile")], str(README), "exec"), scope)
    stopped: list[bool] = []
    checked = asyncio.Event()
    big = tmp_path / "big"
    big.write_bytes(b"x" * (8 << 20))

    original = scope["digest"]

    def digest(path: str, deadline: float, stop: Any) -> str:
        loop.call_soon_threadsafe(checked.set)
        stop.wait(60)  # the cancel below is what ends this wait
        stopped.append(stop.is_set())
        try:
            return str(original(path, deadline, stop))
        except Exception as e:
            stopped.append(str(e) == "hash_file stopped at its time limit")
            raise

    async def main() -> None:
        task = asyncio.create_task(scope["hash_file"].execute(invocation))
        await checked.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    scope["digest"] = digest  # the example's hash_file looks it up here
    invocation = ToolInvocation(
        call=ToolCall.create(id="c", name="hash_file", arguments={"path": str(big)}),
        session_id="s",
        run_id="r",
        workspace=None,
        idempotency_key="k",
    )
    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(main())
        loop.run_until_complete(loop.shutdown_default_executor())
    finally:
        loop.close()
    assert stopped == [True, True]  # told to stop, and stopped at its first check
