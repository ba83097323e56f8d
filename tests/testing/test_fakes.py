"""FixedClock, SequentialIds, RecordingTool and echo_tool."""

from __future__ import annotations

import asyncio

import pytest

from plait.application.arguments import argument_errors
from plait.application.ports import Clock, IdGenerator, Tool, ToolInvocation, ToolOutput
from plait.domain.errors import ToolError
from plait.domain.messages import ToolCall
from plait.domain.tools import EffectClass, ToolSpec
from plait.testing import FixedClock, RecordingTool, SequentialIds, echo_tool

from ._builders import READ_FILE


def invocation(n: int = 1, **arguments: object) -> ToolInvocation:
    call = ToolCall.create(id=f"call_{n}", name="read_file", arguments=dict(arguments))
    return ToolInvocation(
        call=call, session_id="s1", run_id="r1", workspace=None, idempotency_key=f"k{n}"
    )


def run(tool: Tool, inv: ToolInvocation) -> ToolOutput:
    return asyncio.run(tool.execute(inv))


def test_fixed_clock_moves_only_when_advanced() -> None:
    clock: Clock = FixedClock()
    assert isinstance(clock, FixedClock)
    before = (clock.now(), clock.monotonic())

    clock.advance(2.5)

    assert before == (1_700_000_000.0, 1_000.0)
    assert (clock.now(), clock.monotonic()) == (1_700_000_002.5, 1_002.5)


def test_fixed_clock_start_values_and_no_going_back() -> None:
    clock = FixedClock(10.0, monotonic_start=0.0)

    with pytest.raises(ValueError, match="cannot go back"):
        clock.advance(-1)
    assert (clock.now(), clock.monotonic()) == (10.0, 0.0)


def test_sequential_ids_count_per_prefix() -> None:
    ids: IdGenerator = SequentialIds()

    made = [ids.new("msg"), ids.new("run"), ids.new("msg")]

    assert made == ["msg_000001", "run_000001", "msg_000002"]
    assert SequentialIds(start=1_000_001).new("msg") == "msg_1000001"
    assert SequentialIds(prefix_tag="b").new("msg") == "msg_b000001"


def test_recording_tool_returns_its_output_and_records_invocations() -> None:
    recorder = RecordingTool(READ_FILE, output="contents", stoppable=False)
    first, second = invocation(1, path="a"), invocation(2, path="b")

    outputs = [run(recorder.tool, first), run(recorder.tool, second)]

    assert outputs == [ToolOutput(content="contents")] * 2
    assert recorder.invocations == recorder.finished == [first, second]
    assert recorder.calls == [first.call, second.call]
    assert recorder.tool == Tool(spec=READ_FILE, execute=recorder, stoppable=False)


def test_recording_tool_output_can_be_a_tool_output() -> None:
    failed = ToolOutput(content="exit 1", failed=True)

    assert run(RecordingTool(READ_FILE, output=failed).tool, invocation()) == failed


@pytest.mark.parametrize("raises", [ToolError("no such file"), PermissionError])
def test_recording_tool_raises(raises: BaseException | type[BaseException]) -> None:
    recorder = RecordingTool(READ_FILE, raises=raises)
    inv = invocation()

    with pytest.raises((ToolError, PermissionError)):
        run(recorder.tool, inv)

    assert recorder.invocations == recorder.finished == [inv]


def test_recording_tool_calls_a_function_sync_or_async() -> None:
    async def shout(inv: ToolInvocation) -> str:
        await asyncio.sleep(0)
        return str(inv.call.arguments()["path"]).upper()

    sync = RecordingTool(READ_FILE, fn=lambda inv: ToolOutput(content="x", media_type="a/b"))
    asynchronous = RecordingTool(READ_FILE, fn=shout)

    assert run(sync.tool, invocation()) == ToolOutput(content="x", media_type="a/b")
    assert run(asynchronous.tool, invocation(path="p")) == ToolOutput(content="P")


def test_recording_tool_sleeps_and_can_be_cancelled() -> None:
    recorder = RecordingTool(READ_FILE, delay=30.0)
    inv = invocation()

    async def cancel_it() -> bool:
        task = asyncio.create_task(recorder(inv))
        await asyncio.sleep(0.01)
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            return True
        return False

    assert asyncio.run(cancel_it())
    assert (recorder.invocations, recorder.finished) == ([inv], [])


def test_recording_tool_delay_times_out() -> None:
    recorder = RecordingTool(READ_FILE, delay=30.0)

    async def with_timeout() -> None:
        await asyncio.wait_for(recorder(invocation()), timeout=0.01)

    with pytest.raises(TimeoutError):
        asyncio.run(with_timeout())
    assert recorder.finished == []


def test_recording_tool_short_delay_completes() -> None:
    recorder = RecordingTool(READ_FILE, delay=0.001, output="late")

    assert run(recorder.tool, invocation()) == ToolOutput(content="late")


def test_echo_tool() -> None:
    echo = echo_tool()
    call = ToolCall.create(id="c1", name="echo", arguments={"text": "hi there"})
    inv = ToolInvocation(call=call, session_id="s", run_id="r", workspace=None, idempotency_key="k")

    assert run(echo.tool, inv) == ToolOutput(content="hi there")
    assert echo.spec == ToolSpec(
        name="echo",
        description="Return the given text unchanged.",
        parameters={
            "type": "object",
            "properties": {"text": {"type": "string"}},
            "required": ["text"],
            "additionalProperties": False,
        },
        effect=EffectClass.READ_ONLY,
    )
    assert argument_errors(echo.spec, {"text": "x"}) == []
    assert argument_errors(echo.spec, {"txt": "x"}) != []
    assert echo_tool("say").spec.name == "say"
