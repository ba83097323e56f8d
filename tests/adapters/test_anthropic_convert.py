"""Anthropic Messages converter: thinking blocks keep their signatures and their order."""

from __future__ import annotations

import pytest

from plait.adapters.models._anthropic import MessagesStream, build_request, parse_response
from plait.adapters.models._common import Target
from plait.adapters.models._openai_chat import build_request as chat_request
from plait.domain.errors import ModelError
from plait.domain.messages import Message, Usage
from tests.adapters._cassettes import (
    assistant,
    cassette,
    context,
    no_args_tool,
    request_body,
    response_body,
    response_events,
    results,
    tool,
    user,
)

SONNET = Target(vendor="anthropic", adapter="anthropic", model="claude-sonnet-4-0")
COUNTRY = no_args_tool("get_user_country")


def test_thinking_and_tool_use_round_trip() -> None:
    first, second = cassette("anthropic/tool_use_with_thinking.yaml")
    items: list[Message] = [user("What is the largest city in the user country?")]
    request = build_request(
        SONNET, context("", (COUNTRY,), items), max_output_tokens=4096, thinking_budget=3000
    )
    recorded = request_body(first)
    for key in ("messages", "tools", "thinking", "max_tokens"):
        assert request[key] == recorded[key], key

    response = parse_response(SONNET, response_body(first))
    assert response.text.startswith("I'll help you find the largest city")
    assert [(c.id, c.name) for c in response.tool_calls] == [
        ("toolu_01YGzqpRE16Vricda3Aqcejo", "get_user_country")
    ]
    assert response.usage == Usage(input_tokens=398, output_tokens=155)

    a = assistant(response, (COUNTRY,))
    items += [a, *results(a, ["Mexico"])]
    follow_up = build_request(
        SONNET, context("", (COUNTRY,), items), max_output_tokens=4096, thinking_budget=3000
    )
    assert follow_up["messages"] == request_body(second)["messages"]
    assert parse_response(SONNET, response_body(second)).text.startswith("Based on the information")


def test_parallel_calls_and_their_results_in_one_user_turn() -> None:
    first, second = cassette("anthropic/parallel_tool_calls.yaml")
    target = Target(vendor="anthropic", adapter="anthropic", model="claude-haiku-4-5")
    info = tool(
        "retrieve_entity_info",
        {
            "type": "object",
            "properties": {"name": {"type": "string"}},
            "required": ["name"],
            "additionalProperties": False,
        },
        "Get the knowledge about the given entity.",
    )
    system = request_body(first)["system"]
    items: list[Message] = [
        user("Alice, Bob, Charlie and Daisy are a family. Who is the youngest?")
    ]
    response = parse_response(target, response_body(first))
    assert len(response.tool_calls) == 4
    assert response.vendor_state is None
    a = assistant(response, (info,))
    outputs = [
        "alice is bob's wife",
        "bob is alice's husband",
        "charlie is alice's son",
        "daisy is bob's daughter and charlie's younger sister",
    ]
    items += [a, *results(a, outputs)]
    follow_up = build_request(target, context(system, (info,), items), max_output_tokens=4096)
    recorded = request_body(second)
    assert follow_up["messages"] == recorded["messages"]
    assert follow_up["system"] == recorded["system"]
    assert follow_up["tools"] == recorded["tools"]


def test_thinking_stream_keeps_the_signature() -> None:
    (only,) = cassette("anthropic/thinking_stream.yaml")
    events = response_events(only)
    stream = MessagesStream(SONNET)
    shown = [d for e in events if (d := stream.feed(e))]
    response = stream.finish()
    assert "".join(shown) == response.text and response.text
    assert response.vendor_state is not None
    thinking = response.vendor_state.data["blocks"][0]
    assert thinking["type"] == "thinking"
    assert thinking["thinking"].startswith("This is a straightforward question")
    assert len(thinking["signature"]) > 100
    assert response.usage.output_tokens > 1

    cut = MessagesStream(SONNET)
    for e in events[: len(events) // 2]:
        cut.feed(e)
    with pytest.raises(ModelError):
        cut.finish()


def test_thinking_never_reaches_another_vendor() -> None:
    first, _ = cassette("anthropic/tool_use_with_thinking.yaml")
    response = parse_response(SONNET, response_body(first))
    a = assistant(response, (COUNTRY,))
    items: list[Message] = [user("q"), a, *results(a, ["Mexico"])]
    gpt = Target(vendor="openai", adapter="openai-chat", model="gpt-4o")
    body = chat_request(gpt, context("", (COUNTRY,), items))
    assert "signature" not in repr(body) and "thinking" not in repr(body)
    assert body["messages"][1]["content"] == response.text
    assert body["messages"][2]["tool_call_id"] == "toolu_01YGzqpRE16Vricda3Aqcejo"
