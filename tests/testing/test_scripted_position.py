"""Where the scripted model is in its script, and the usage it reports."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from plait.domain.errors import ModelError, ScriptError
from plait.domain.messages import Message, ToolCall, Usage
from plait.testing import ScriptedModel, scripted

from ._builders import READ_FILE, ask, assistant, context, history, tool_result, user

TEXTS = [{"text": f"t{n}"} for n in range(1, 6)]


def model_of(*turns: dict[str, Any]) -> ScriptedModel:
    return ScriptedModel({"version": 1, "assistant": list(turns)})


def test_position_is_the_number_of_assistant_messages_in_the_context() -> None:
    model = model_of(*TEXTS)

    answers = [ask(model, context(history(n))).text for n in (3, 0, 4, 1, 2)]

    assert answers == ["t4", "t1", "t5", "t2", "t3"]


def test_a_new_instance_continues_where_the_session_is() -> None:
    ask(model_of(*TEXTS), context(history(0)))
    ask(model_of(*TEXTS), context(history(1)))

    # As `plait send` in a new process would: nothing in memory, two steps in history.
    assert ask(model_of(*TEXTS), context(history(2))).text == "t3"


def test_asking_again_after_a_crash_gives_the_same_turn() -> None:
    model = model_of(*TEXTS)
    first = ask(model, context(history(1)))

    assert ask(model, context(history(1))) == first
    assert ask(model_of(*TEXTS), context(history(1))) == first


def test_corrections_move_to_the_next_turn_of_the_step() -> None:
    model = model_of({"malformed": "bad_json"}, {"malformed": "missing_id"}, {"text": "fixed"})

    replies = [ask(model, context(history(0), corrections=n)) for n in range(3)]

    assert [(r.text, [c.id for c in r.tool_calls]) for r in replies] == [
        ("", ["call_1_1"]),
        ("", [None]),
        ("fixed", []),
    ]


def test_corrections_are_read_from_the_context_not_from_memory() -> None:
    script = ({"malformed": "bad_json"}, {"text": "fixed"}, {"text": "next"})

    assert ask(model_of(*script), context(history(0), corrections=1)).text == "fixed"


def test_rejected_attempts_do_not_shift_later_steps() -> None:
    # The corrected answer becomes one assistant message; the rejected attempt never does.
    model = model_of({"malformed": "unknown_tool"}, {"text": "fixed"}, {"text": "next"})
    ask(model, context(history(0)))
    ask(model, context(history(0), corrections=1))

    assert ask(model, context(history(1))).text == "next"


def test_an_answer_is_sticky_within_its_step() -> None:
    model = model_of({"text": "only answer"}, {"text": "next"})

    assert ask(model, context(history(0), corrections=2)).text == "only answer"


def test_error_turns_are_consumed_by_retries_of_the_same_step() -> None:
    model = model_of(
        {"error": "rate_limited"}, {"error": "transient"}, {"text": "ok"}, {"text": "after"}
    )
    codes = []
    for _ in range(2):
        with pytest.raises(ModelError) as info:
            ask(model, context(history(0)))
        codes.append(info.value.model_code)

    assert codes == ["RATE_LIMITED", "TRANSIENT"]
    assert ask(model, context(history(0))).text == "ok"
    assert ask(model, context(history(0))).text == "ok"
    assert ask(model, context(history(1))).text == "after"


def test_explicitly_rejected_turns_belong_to_the_next_answer() -> None:
    model = model_of(
        {"tool_calls": [{"name": "not_a_tool"}], "rejected": True},
        {"text": "fixed"},
        {"text": "next"},
    )

    assert ask(model, context(history(0))).tool_calls[0].name == "not_a_tool"
    assert ask(model, context(history(0), corrections=1)).text == "fixed"
    assert ask(model, context(history(1))).text == "next"


def test_trailing_rejected_turns_then_exhaustion() -> None:
    model = model_of({"text": "a"}, {"error": "transient"})
    with pytest.raises(ModelError):
        ask(model, context(history(1)))

    with pytest.raises(ScriptError, match=r"assistant turn 3 requested, script has 2"):
        ask(model, context(history(1)))


def test_exhaustion_counts_turns_past_the_end() -> None:
    model = model_of({"malformed": "bad_json"}, {"text": "a"}, {"text": "b"})

    with pytest.raises(ScriptError) as info:
        ask(model, context(history(4)))

    assert info.value.message == (
        "script exhausted: assistant turn 6 requested, script has 3 (<script>)"
    )


def test_only_assistant_messages_count() -> None:
    call = ToolCall.create(id="c1", name="read_file", arguments={"path": "x"})
    items: list[Message] = [user(0), assistant(1, "", call), tool_result(2, "c1"), user(3)]

    assert ask(model_of(*TEXTS), context(items)).text == "t2"


def test_reviewer_and_summarizer_use_a_counter_in_memory() -> None:
    script = {
        "version": 1,
        "reviewer": [{"structured": "r1"}, {"structured": "r2"}],
        "summarizer": [{"structured": "s1"}],
    }
    model = ScriptedModel(script)

    seen = [
        ask(model, context(history(3)), role=role).structured
        for role in ("reviewer", "summarizer", "reviewer")
    ]

    assert seen == ["r1", "s1", "r2"]
    assert ask(ScriptedModel(script), role="reviewer").structured == "r1"


# --- usage --------------------------------------------------------------------------------


def tokens(chars: int) -> int:
    return max(1, math.ceil(chars / 4))


def spec_chars() -> int:
    shape = {
        "name": READ_FILE.name,
        "description": READ_FILE.description,
        "parameters": READ_FILE.parameters,
    }
    return len(json.dumps(shape, separators=(",", ":")))


def test_usage_estimate_counts_everything_the_model_reads_and_writes() -> None:
    call = ToolCall.create(id="c1", name="read_file", arguments={"path": "a.txt"})
    items: list[Message] = [
        user(0, "u" * 100),
        assistant(1, "a" * 10, call),
        tool_result(2, "c1", "r" * 50),
    ]
    model = model_of(
        {"text": "x"},
        {"text": "y" * 20, "tool_calls": [{"name": "read_file", "arguments": {"path": "b"}}]},
    )
    ctx = context(items, instructions="i" * 40, corrections=1)

    usage = ask(model, ctx).usage

    item_chars = 100 + (10 + len("read_file") + len('{"path":"a.txt"}')) + (9 + 50)
    correction_chars = len("bad") + len("invalid")
    assert usage == Usage(
        input_tokens=tokens(40 + spec_chars() + item_chars + correction_chars),
        output_tokens=tokens(20 + len("read_file") + len('{"path":"b"}')),
    )


def test_usage_is_at_least_one_token_and_partial_overrides_keep_the_estimate() -> None:
    model = model_of({"text": "", "usage": {"output_tokens": 7}})

    usage = ask(model, context([user(0, "hi")], tools=(), instructions="")).usage

    assert usage == Usage(input_tokens=1, output_tokens=7)


def test_structured_output_is_counted_once() -> None:
    model = ScriptedModel({"version": 1, "reviewer": [{"structured": {"k": "v" * 40}}]})

    usage = ask(model, role="reviewer").usage

    assert usage.output_tokens == tokens(len(json.dumps({"k": "v" * 40}, separators=(",", ":"))))


def test_each_message_is_measured_once(monkeypatch: pytest.MonkeyPatch) -> None:
    measured: list[str] = []
    original = scripted._message_chars

    def counting(message: Message) -> int:
        measured.append(message.id)
        return original(message)

    monkeypatch.setattr(scripted, "_message_chars", counting)
    items = history(500)  # 1,001 messages
    model = model_of(*[{"text": "again"}] * 501)

    first = ask(model, context(items))
    second = ask(model, context(items))
    items += [user(10_000, "more")]
    third = ask(model, context(items))

    assert len(measured) == len(items) == 1_002
    assert first.usage == second.usage
    assert third.usage.input_tokens > first.usage.input_tokens
