"""ContextBuilder: today's context by default, token counts cached per message."""

from __future__ import annotations

from dataclasses import dataclass, field

from plait.application.context_builder import ApproxMeter, ContextBuilder
from plait.domain.context import Correction
from plait.domain.messages import AssistantMessage, Message, UserMessage
from plait.domain.tools import ToolSpec

from .conftest import make_rig, reply, run, spec


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


def test_the_cache_is_bounded() -> None:
    meter = CountingMeter()
    builder = ContextBuilder(instructions="", tools=(), meter=meter, cache_size=2)
    history: list[Message] = [user(1), user(2), user(3)]
    builder.count(builder.assistant(history))
    builder.count(builder.assistant(history))
    assert len(meter.counted) == 6  # with room for 2, a scan of 3 re-counts each time


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
