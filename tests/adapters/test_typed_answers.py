"""Typed final answers per provider, against the fake servers: the native request field
is sent (OpenAI ``response_format`` and ``text.format``, Gemini ``responseJsonSchema``,
Anthropic a forced ``final_answer`` tool) and the answer comes back parsed."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any

import pytest

from plait.adapters.models._anthropic import take_answer
from plait.adapters.models._common import Target
from plait.adapters.models._gemini import build_request as gemini_request
from plait.application.answers import check_answer
from plait.application.ports import ModelResponse, RawToolCall
from plait.domain.answers import OutputSchema
from plait.domain.errors import ConfigError
from plait.testing.fake_providers import FakeProvider, FakeTurn
from tests.adapters._cassettes import tool
from tests.adapters._clients import ask, client_for

SCHEMA = OutputSchema.create(
    {
        "type": "object",
        "properties": {"city": {"type": "string"}, "people": {"type": "integer"}},
        "required": ["city", "people"],
        "additionalProperties": False,
    },
    name="Census",
)
ANSWER = {"city": "Lyon", "people": 522_000}
READ = tool("read_file", {"type": "object", "properties": {"path": {"type": "string"}}})


def _typed(schema: OutputSchema = SCHEMA, tools: tuple[Any, ...] = ()) -> Any:
    request = ask(tools)
    return replace(request, context=replace(request.context, output_schema=schema))


def _answer_turn(dialect: str) -> FakeTurn:
    if dialect == "anthropic":
        return FakeTurn(calls=(("toolu_1", "final_answer", ANSWER),))
    import json

    return FakeTurn(text=json.dumps(ANSWER))


def _native_field(dialect: str, body: dict[str, Any]) -> Any:
    if dialect == "openai":
        return body["response_format"]
    if dialect == "openai-responses":
        return body["text"]["format"]
    if dialect == "gemini":
        return body["generationConfig"]
    return {"tools": body["tools"], "tool_choice": body["tool_choice"]}


EXPECTED = {
    "openai": {
        "type": "json_schema",
        "json_schema": {"name": "Census", "schema": SCHEMA.schema(), "strict": True},
    },
    "openai-responses": {
        "type": "json_schema",
        "name": "Census",
        "schema": SCHEMA.schema(),
        "strict": True,
    },
    "gemini": {"responseMimeType": "application/json", "responseJsonSchema": SCHEMA.schema()},
    "anthropic": {
        "tools": [
            {
                "name": "final_answer",
                "description": "Give your final answer (call this instead of replying in text).",
                "input_schema": SCHEMA.schema(),
            }
        ],
        "tool_choice": {"type": "tool", "name": "final_answer"},
    },
}


@pytest.mark.slow
@pytest.mark.parametrize("dialect", list(EXPECTED))
@pytest.mark.parametrize("stream", [False, True])
def test_native_mode_is_sent_and_the_answer_parsed(dialect: str, stream: bool) -> None:
    with FakeProvider(dialect, [_answer_turn(dialect)]) as fake:
        model = client_for(dialect, fake.base_url)
        request = _typed()
        if stream:
            request = replace(request, on_text=lambda _: None)
        response = asyncio.run(model.complete(request))
    (sent,) = fake.requests
    assert _native_field(dialect, sent.body) == EXPECTED[dialect]
    assert response.tool_calls == ()
    assert check_answer(SCHEMA, response) == (ANSWER, ())


@pytest.mark.slow
def test_anthropic_lets_the_model_call_a_tool_before_answering() -> None:
    turns = [FakeTurn(calls=(("toolu_1", "read_file", {"path": "a"}),))]
    with FakeProvider("anthropic", turns) as fake:
        model = client_for("anthropic", fake.base_url)
        response = asyncio.run(model.complete(_typed(tools=(READ,))))
    body = fake.requests[0].body
    assert [t["name"] for t in body["tools"]] == ["read_file", "final_answer"]
    assert body["tool_choice"] == {"type": "any"}
    assert [c.name for c in response.tool_calls] == ["read_file"]


@pytest.mark.slow
def test_anthropic_wraps_an_answer_that_is_not_an_object() -> None:
    schema = OutputSchema.create({"type": "array", "items": {"type": "integer"}})
    with FakeProvider(
        "anthropic", [FakeTurn(calls=(("t1", "final_answer", {"answer": [1, 2]}),))]
    ) as fake:
        model = client_for("anthropic", fake.base_url)
        response = asyncio.run(model.complete(_typed(schema)))
    (answer_tool,) = fake.requests[0].body["tools"]
    assert answer_tool["input_schema"]["properties"]["answer"] == schema.schema()
    assert check_answer(schema, response) == ([1, 2], ())


def test_anthropic_answer_that_is_not_json_is_left_for_a_correction() -> None:
    raw = ModelResponse(tool_calls=(RawToolCall(id="t1", name="final_answer", arguments="{oops"),))
    taken = take_answer(SCHEMA, raw)
    assert taken.tool_calls == () and taken.text == "{oops"
    value, problems = check_answer(SCHEMA, taken)
    assert value is None and "not valid JSON" in problems[0]


def test_gemini_refuses_an_output_schema_it_cannot_express() -> None:
    schema = OutputSchema.create({"type": "object", "oneOf": [{"required": ["a"]}]})
    target = Target(vendor="google", adapter="gemini", model="gemini-2.5-pro")
    with pytest.raises(ConfigError, match=r"the output schema: Gemini cannot express .*'oneOf'"):
        gemini_request(target, _typed(schema).context)


@pytest.mark.slow
def test_a_schema_outside_openai_strict_mode_is_sent_non_strict() -> None:
    loose = OutputSchema.create({"type": "object", "properties": {"a": {"type": "string"}}})
    with FakeProvider("openai", [FakeTurn(text='{"a": "x"}')]) as fake:
        model = client_for("openai", fake.base_url)
        asyncio.run(model.complete(_typed(loose)))
    assert fake.requests[0].body["response_format"]["json_schema"]["strict"] is False
