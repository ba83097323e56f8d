"""Gemini converter: thought signatures go back on the parts they came with."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from plait.adapters.models._common import Target
from plait.adapters.models._gemini import GenerateStream, build_request, parse_response
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
    user,
)

PRO = Target(vendor="google", adapter="gemini", model="gemini-2.5-pro")
COUNTRY = no_args_tool("get_user_country")


def _signature(part: dict[str, Any]) -> bytes:
    text: str = part["thoughtSignature"]
    return base64.urlsafe_b64decode(text.replace("+", "-").replace("/", "_"))


def _model_turn(body: dict[str, Any]) -> dict[str, Any]:
    turns: list[dict[str, Any]] = [c for c in body["contents"] if c["role"] == "model"]
    return turns[-1]


def test_function_call_round_trip_carries_the_thought_signature() -> None:
    first, second = cassette("gemini/function_call.yaml")
    prompt = (
        "What is the largest city in the user country? "
        "Use the get_user_country tool and then your own world knowledge."
    )
    items: list[Message] = [user(prompt)]
    request = build_request(PRO, context("", (COUNTRY,), items))
    recorded = request_body(first)
    assert request["contents"] == recorded["contents"]
    assert (
        request["tools"][0]["functionDeclarations"][0]["parametersJsonSchema"]
        == (recorded["tools"][0]["functionDeclarations"][0]["parameters_json_schema"])
    )

    response = parse_response(PRO, response_body(first))
    (call,) = response.tool_calls
    assert call.name == "get_user_country" and call.id
    assert response.usage == Usage(input_tokens=49, output_tokens=148, reasoning_tokens=136)

    a = assistant(response, (COUNTRY,))
    items += [a, *results(a, ["Mexico"])]
    follow_up = build_request(PRO, context("", (COUNTRY,), items))
    ours, theirs = _model_turn(follow_up)["parts"], _model_turn(request_body(second))["parts"]
    assert len(ours) == len(theirs) == 1
    assert _signature(ours[0]) == _signature(theirs[0])
    assert ours[0]["functionCall"]["name"] == theirs[0]["functionCall"]["name"]
    # our call id (Gemini sent none) pairs the call with its response, as the recording's did
    response_part = follow_up["contents"][-1]["parts"][0]["functionResponse"]
    assert response_part["id"] == ours[0]["functionCall"]["id"] == call.id
    assert response_part["name"] == "get_user_country"

    final = parse_response(PRO, response_body(second))
    assert final.text == "The largest city in Mexico is Mexico City."
    assert final.vendor_state is not None  # a signed text part


def test_stream_with_signed_call_then_text() -> None:
    first, second = cassette("gemini/stream_tool_call_thought_signature.yaml")
    target = Target(vendor="google", adapter="gemini", model="gemini-3-pro-preview")
    country = no_args_tool("get_country")
    stream = GenerateStream(target)
    for e in response_events(first):
        stream.feed(e)
    response = stream.finish()
    assert len(response.tool_calls) == 1
    a = assistant(response, (country,))
    items: list[Message] = [
        user("What is the capital of the user country? Call the tool"),
        a,
        *results(a, ["Mexico"]),
    ]
    follow_up = build_request(target, context("", (country,), items))
    ours, theirs = _model_turn(follow_up)["parts"], _model_turn(request_body(second))["parts"]
    assert [_signature(p) for p in ours] == [_signature(p) for p in theirs]

    stream = GenerateStream(target)
    shown = [d for e in response_events(second) if (d := stream.feed(e))]
    final = stream.finish()
    assert "".join(shown) == final.text == "The capital of Mexico is Mexico City."
    assert final.usage.input_tokens == 257

    cut = GenerateStream(target)
    for e in response_events(second)[:2]:
        cut.feed(e)
    with pytest.raises(ModelError):
        cut.finish()


def test_foreign_calls_to_gemini_3_use_the_documented_stand_in_signature() -> None:
    from plait.adapters.models._anthropic import parse_response as anthropic_parse

    first, _ = cassette("anthropic/tool_use_with_thinking.yaml")
    claude = Target(vendor="anthropic", adapter="anthropic", model="claude-sonnet-4-0")
    a = assistant(anthropic_parse(claude, response_body(first)), (COUNTRY,))
    items: list[Message] = [user("q"), a, *results(a, ["Mexico"])]
    g3 = Target(vendor="google", adapter="gemini", model="gemini-3-pro-preview")
    parts = _model_turn(build_request(g3, context("", (COUNTRY,), items)))["parts"]
    assert parts[0] == {"text": a.text}
    assert parts[1]["thoughtSignature"] == "skip_thought_signature_validator"
    assert "signature" not in repr(parts[0])
