"""OpenAI Chat Completions converter against recorded exchanges (and DeepSeek's)."""

from __future__ import annotations

import pytest

from plait.adapters.models._common import Target
from plait.adapters.models._openai_chat import ChatStream, build_request, parse_response
from plait.domain.errors import ModelError, ModelErrorCode
from plait.domain.messages import Message, Usage
from tests.adapters._cassettes import (
    assistant,
    cassette,
    context,
    request_body,
    response_body,
    response_events,
    results,
    tool,
    user,
    without_none,
)

OPENAI = Target(vendor="openai", adapter="openai-chat", model="gpt-4.1-mini")
TEMPERATURE = tool(
    "get_temperature",
    {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
        "additionalProperties": False,
    },
)


def test_tool_call_then_result_round_trip() -> None:
    first, second = cassette("openai_chat/tool_call_then_result.yaml")
    tools = (TEMPERATURE,)
    items: list[Message] = [user("What is the temperature in Tokyo?")]
    request = build_request(OPENAI, context("You are a helpful assistant.", tools, items))
    recorded = request_body(first)
    assert request["messages"] == recorded["messages"]
    assert request["tools"] == recorded["tools"]

    response = parse_response(OPENAI, response_body(first))
    assert response.text == ""
    assert [(c.id, c.name, c.arguments) for c in response.tool_calls] == [
        ("call_bhZkmIKKItNGJ41whHUHB7p9", "get_temperature", '{"city":"Tokyo"}')
    ]
    assert response.usage == Usage(input_tokens=50, output_tokens=15)
    assert response.vendor_state is None

    a = assistant(response, tools)
    items += [a, *results(a, ["20.0"])]
    follow_up = build_request(OPENAI, context("You are a helpful assistant.", tools, items))
    assert without_none(follow_up["messages"]) == request_body(second)["messages"]

    final = parse_response(OPENAI, response_body(second))
    assert final.text == "The temperature in Tokyo is currently 20.0 degrees Celsius."
    assert final.tool_calls == ()
    assert final.usage == Usage(input_tokens=75, output_tokens=15)


def test_stream_accumulates_call_then_text() -> None:
    first, second = cassette("openai_chat/stream.yaml")
    target = Target(vendor="openai", adapter="openai-chat", model="gpt-4o-mini")
    capital = tool(
        "get_capital",
        {
            "type": "object",
            "properties": {"country": {"type": "string"}},
            "required": ["country"],
            "additionalProperties": False,
        },
    )
    items: list[Message] = [user("What is the capital of the UK? Use the tool, then answer.")]
    request = build_request(target, context("", (capital,), items), stream=True)
    recorded = request_body(first)
    assert {k: request[k] for k in ("messages", "tools", "stream", "stream_options")} == {
        k: recorded[k] for k in ("messages", "tools", "stream", "stream_options")
    }
    stream = ChatStream(target)
    shown = [d for e in response_events(first) if (d := stream.feed(e))]
    response = stream.finish()
    assert shown == []
    assert [(c.id, c.arguments) for c in response.tool_calls] == [
        ("call_ZR5UUuTt3pf61kjwAJIYdVMj", '{"country":"UK"}')
    ]
    a = assistant(response, (capital,))
    items += [a, *results(a, ["London"])]
    follow_up = build_request(target, context("", (capital,), items), stream=True)
    assert without_none(follow_up["messages"]) == without_none(request_body(second)["messages"])

    stream = ChatStream(target)
    shown = [d for e in response_events(second) if (d := stream.feed(e))]
    final = stream.finish()
    assert "".join(shown) == final.text
    assert final.text.startswith("The capital of the UK is")
    assert final.usage.input_tokens > 0


def test_stream_cut_off_before_finish_is_an_error_not_a_partial_call() -> None:
    first, _ = cassette("openai_chat/stream.yaml")
    events = response_events(first)
    stream = ChatStream(OPENAI)
    for e in events[:3]:
        stream.feed(e)
    with pytest.raises(ModelError) as info:
        stream.finish()
    assert info.value.model_code == ModelErrorCode.TRANSIENT
    assert "ended before the response was complete" in info.value.message


def test_deepseek_reasoning_content_is_opaque_state_for_the_current_turn_only() -> None:
    (only,) = cassette("deepseek/thinking.yaml")
    target = Target(vendor="deepseek", adapter="openai-chat", model="deepseek-reasoner")
    response = parse_response(target, response_body(only), "deepseek")
    assert response.text.startswith("Crossing the street safely")
    assert response.usage == Usage(input_tokens=12, output_tokens=789, reasoning_tokens=415)
    assert response.vendor_state is not None
    assert response.vendor_state.vendor == "deepseek"
    assert response.vendor_state.data["model"] == "deepseek-reasoner"
    reasoning = response.vendor_state.data["reasoning_content"]
    assert reasoning.startswith("Okay, the user is asking how to cross the street.")

    a = assistant(response, ())
    # same turn (no user message after it): handed back verbatim
    same_turn = build_request(target, context("", (), [user("How do I cross?"), a]))
    assert same_turn["messages"][-1]["reasoning_content"] == reasoning
    # a later turn: DeepSeek wants earlier turns' reasoning left out
    later = build_request(target, context("", (), [user("How?"), a, user("Thanks", 2)]))
    assert "reasoning_content" not in later["messages"][1]
    # another vendor never sees it
    other = Target(vendor="openai", adapter="openai-chat", model="gpt-4o")
    foreign = build_request(other, context("", (), [user("How?"), a]))
    assert foreign["messages"][-1] == {"role": "assistant", "content": response.text}


def test_an_error_body_with_status_200_is_classified() -> None:
    with pytest.raises(ModelError) as info:
        parse_response(OPENAI, {"error": {"message": "overloaded", "type": "server_error"}})
    assert info.value.model_code == ModelErrorCode.TRANSIENT
