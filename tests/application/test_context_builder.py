"""ContextBuilder: today's context by default, token counts cached per message."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from plait.application.context_builder import ApproxMeter, ContextBuilder
from plait.application.ports import ModelRequest, ModelResponse
from plait.domain.context import Correction
from plait.domain.messages import AssistantMessage, Message, UserMessage
from plait.domain.tools import ToolSpec
from plait.testing import RecordingTool

from .conftest import call, make_rig, reply, run, spec


def spec_tool() -> RecordingTool:
    return RecordingTool(spec("read"), output="content")


@dataclass
class CountingMeter:
    """Counts one token per character and remembers which messages it counted."""

    counted: list[str] = field(default_factory=list)
    name: str = "chars"
    exact: bool = True

    def count_text(self, text: str) -> int:
        return len(text)

    def count_message(self, message: Message) -> int:
        self.counted.append(message.id)
        return 10

    def count_tools(self, tools: tuple[ToolSpec, ...]) -> int:
        return 100 * len(tools)


def user(n: int) -> UserMessage:
    return UserMessage(id=f"msg_{n}", text=f"hello {n}", created_at=1.0)


def test_the_assistant_context_is_the_whole_history_with_corrections() -> None:
    tools = (spec("read"),)
    builder = ContextBuilder(instructions="be brief", tools=tools)
    history: list[Message] = [user(1), user(2)]
    fix = Correction(rejected_text="bad", problems=("no such tool",))
    ctx = builder.assistant(history, [fix])
    assert ctx.instructions == "be brief" and ctx.tools == tools
    assert list(ctx.items) == history and ctx.corrections == (fix,)
    assert ctx.output_type is AssistantMessage
    history.append(user(3))
    assert len(ctx.items) == 2  # later appends do not show through


def test_counts_are_cached_per_message() -> None:
    meter = CountingMeter()
    builder = ContextBuilder(instructions="abc", tools=(spec("read"),), meter=meter)
    history: list[Message] = [user(1), user(2)]
    assert builder.count(builder.assistant(history)) == 3 + 100 + 20
    history.append(user(3))
    assert builder.count(builder.assistant(history)) == 3 + 100 + 30
    assert meter.counted == ["msg_1", "msg_2", "msg_3"]  # each message counted once


def test_the_caches_are_bounded() -> None:
    meter = CountingMeter()
    builder = ContextBuilder(instructions="", tools=(), meter=meter, cache_size=2, histories=1)
    a: list[Message] = [user(1), user(2), user(3)]
    assert builder.count_items(a) == 30
    assert builder.count_items(a) == 30 and len(meter.counted) == 3  # summed before
    assert builder.count_items([user(4)]) == 10  # another history: a's sum is dropped
    assert builder.count_items(a) == 30
    # with room for 2 counts, the 3 messages of a are counted again
    assert meter.counted == ["msg_1", "msg_2", "msg_3", "msg_4", "msg_1", "msg_2", "msg_3"]


def test_each_message_is_counted_once_per_meter() -> None:
    chars, other = CountingMeter(), CountingMeter(name="other")
    builder = ContextBuilder(instructions="", tools=(), meter=chars)
    history: list[Message] = [user(1), user(2)]
    builder.count(builder.assistant(history))
    builder.meter = other  # a different meter counts for itself
    builder.count(builder.assistant(history))
    builder.meter = chars
    history.append(user(3))
    assert builder.count(builder.assistant(history)) == 30
    assert chars.counted == ["msg_1", "msg_2", "msg_3"]
    assert other.counted == ["msg_1", "msg_2"]


def test_a_history_that_does_not_extend_the_last_one_is_summed_afresh() -> None:
    meter = CountingMeter()
    builder = ContextBuilder(instructions="", tools=(), meter=meter)
    long: list[Message] = [user(1), user(2), user(3)]
    assert builder.count_items(long) == 30
    fork: list[Message] = [user(1), user(2), UserMessage(id="msg_x", text="", created_at=1.0)]
    assert builder.count_items(fork) == 30  # same first message, another third one
    assert builder.count_items(long[:2]) == 20  # a shorter prefix
    assert builder.count_items([]) == 0
    assert meter.counted == ["msg_1", "msg_2", "msg_3", "msg_x"]


def test_a_long_run_counts_each_message_once_across_steps() -> None:
    """A consumer measuring every step's context (as compaction pressure does) costs one
    meter call per new message, never a re-count of the session."""
    meter = CountingMeter()
    builder = ContextBuilder(instructions="abc", tools=(spec("read"),), meter=meter)
    seen: list[tuple[int, int]] = []

    def step(n: int) -> Callable[[ModelRequest], ModelResponse]:
        def answer(request: ModelRequest) -> ModelResponse:
            items = request.context.items
            seen.append((builder.count(request.context), len(items)))
            if n == 5:
                return reply("done")
            return reply("", call("read", {"text": str(n)}, f"c{n}"))

        return answer

    rig = make_rig([step(n) for n in range(1, 6)], [spec_tool()], context=builder)
    s = run(rig.service.create_session())
    assert run(rig.service.send(s.id, "go")).run.status.value == "completed"
    # each step's context: instructions 3 + tools 100 + 10 per message, all of it
    assert seen == [(103 + 10 * n, n) for n in (1, 3, 5, 7, 9)]
    history = [sm.message.id for sm in rig.history(s.id)]
    assert meter.counted == history[:9]  # each message once, in order (not the last answer)


def test_the_default_meter_estimates_conservatively() -> None:
    meter = ApproxMeter()
    assert meter.count_text("") == 0
    assert meter.count_text("abcdef") == 2
    assert meter.count_message(user(1)) > meter.count_text("hello 1")


def test_the_service_uses_the_builder_it_is_given() -> None:
    builder = ContextBuilder(instructions="custom instructions", tools=())
    rig = make_rig([reply("hi")], context=builder)
    s = run(rig.service.create_session())
    run(rig.service.send(s.id, "go"))
    (request,) = rig.turns.requests
    assert request.context.instructions == "custom instructions"
    assert [m.kind for m in request.context.items] == ["user"]


class Watched(list[Message]):
    """A history that counts how many of its messages are looked at."""

    reads = 0

    def __getitem__(self, index: Any) -> Any:
        self.reads += 1
        return super().__getitem__(index)


def test_a_grown_history_costs_only_its_new_messages() -> None:
    builder = ContextBuilder(instructions="", tools=(), meter=CountingMeter())
    history = Watched(user(n) for n in range(1, 1001))
    assert builder.count(builder.assistant(history)) == 10_000
    history.append(user(1001))
    history.reads = 0
    assert builder.count(builder.assistant(history)) == 10_010
    assert history.reads == 3  # the first message, the last one summed, the new one
