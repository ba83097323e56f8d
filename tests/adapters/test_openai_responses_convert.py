"""OpenAI Responses converter: reasoning items with encrypted content go back verbatim."""

from __future__ import annotations

import pytest

from plait.adapters.models._anthropic import build_request as anthropic_request
from plait.adapters.models._common import Target
from plait.adapters.models._openai_responses import ResponsesStream, build_request, parse_response
from plait.domain.errors import ModelError, ModelErrorCode
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
    user,
    without_none,
)

GPT5 = Target(vendor="openai", adapter="openai-responses", model="gpt-5")
MEANING = no_args_tool("get_meaning_of_life")


def test_reasoning_items_are_handed_back_in_order_with_their_encrypted_content() -> None:
    first, second = cassette("openai_responses/reasoning_function_call.yaml")
    items: list[Message] = [user("What is the meaning of life?")]
    request = build_request(GPT5, context("", (MEANING,), items), reasoning=True)
    recorded = request_body(first)
    assert request["input"] == recorded["input"]
    assert request["include"] == ["reasoning.encrypted_content"]
    assert request["store"] is False

    response = parse_response(GPT5, response_body(first))
    assert [(c.id, c.name, c.arguments) for c in response.tool_calls] == [
        ("call_cp3x6W9eeyMIryJUNhgMaP5w", "get_meaning_of_life", "{}")
    ]
    assert response.vendor_state is not None and response.vendor_state.vendor == "openai"

    a = assistant(response, (MEANING,))
    items += [a, *results(a, ["42"])]
    follow_up = build_request(GPT5, context("", (MEANING,), items), reasoning=True)
    assert without_none(follow_up["input"]) == without_none(request_body(second)["input"])

    final = parse_response(GPT5, response_body(second))
    assert final.text == "42"
    assert final.usage == Usage(input_tokens=257, output_tokens=5)
    assert final.vendor_state is None


def test_reasoning_is_dropped_for_another_model_family_and_another_vendor() -> None:
    first, _ = cassette("openai_responses/reasoning_function_call.yaml")
    response = parse_response(GPT5, response_body(first))
    a = assistant(response, (MEANING,))
    items: list[Message] = [user("What is the meaning of life?"), a, *results(a, ["42"])]
    mini = Target(vendor="openai", adapter="openai-responses", model="gpt-5-mini")
    other_model = build_request(mini, context("", (MEANING,), items))
    assert [i.get("type") for i in other_model["input"]] == [
        None,
        "function_call",
        "function_call_output",
    ]
    claude = Target(vendor="anthropic", adapter="anthropic", model="claude-sonnet-4-5")
    body = anthropic_request(claude, context("", (MEANING,), items))
    assert "encrypted_content" not in repr(body) and "rs_" not in repr(body)


def test_stream_ends_with_the_completed_response() -> None:
    (only,) = cassette("openai_responses/stream_reasoning.yaml")
    events = response_events(only)
    stream = ResponsesStream(GPT5)
    for e in events:
        stream.feed(e)
    response = stream.finish()
    assert [(c.id, c.arguments) for c in response.tool_calls] == [
        ("call_CWXgs68YprAjp6t0371hiPOI", '{"result":6666}')
    ]
    completed = events[-1]["response"]["output"][0]
    assert response.vendor_state is not None
    assert (
        response.vendor_state.data["order"][0]["encrypted_content"]
        == completed["encrypted_content"]
    )
    assert response.usage.reasoning_tokens > 0

    cut = ResponsesStream(GPT5)
    for e in events[:-1]:
        cut.feed(e)
    with pytest.raises(ModelError) as info:
        cut.finish()
    assert info.value.model_code == ModelErrorCode.TRANSIENT


def test_a_failed_response_is_an_error() -> None:
    body = {"status": "failed", "error": {"code": "server_error", "message": "boom"}, "output": []}
    with pytest.raises(ModelError) as info:
        parse_response(GPT5, body)
    assert info.value.model_code == ModelErrorCode.TRANSIENT
