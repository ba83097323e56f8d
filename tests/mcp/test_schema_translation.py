"""Each provider adapter on real MCP schemas: the tools/list output of the four real
servers (captured once into tests/mcp/fixtures/) and the constructs MCP servers send
($ref/$defs, draft-07 definitions, anyOf, oneOf, patternProperties, additionalProperties,
formats, large enums). Each schema is sent in a shape the provider takes, or refused with
an error naming the tool, the keyword and the provider."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import mcp.types as mt
import pytest

from plait.adapters.mcp import McpServerConfig
from plait.adapters.mcp._convert import tool_info
from plait.adapters.models import _anthropic, _gemini, _openai_chat, _openai_responses
from plait.application.arguments import argument_errors
from plait.domain.errors import ConfigError
from plait.domain.tools import ToolSpec

FIXTURES = Path(__file__).parent / "fixtures"
SERVERS = ("git", "time", "filesystem", "everything")
NAME = r"^[a-zA-Z0-9_-]{1,64}$"


def specs(server: str) -> list[ToolSpec]:
    listed = json.loads((FIXTURES / f"{server}.tools.json").read_text())["tools"]
    config = McpServerConfig(name=server, command="x")
    return [tool_info(config, mt.Tool.model_validate(t)).spec for t in listed]


def openai_chat(spec: ToolSpec) -> dict[str, Any]:
    function: dict[str, Any] = _openai_chat.tool_param(spec)["function"]
    return function


PROVIDERS: dict[str, Callable[[ToolSpec], dict[str, Any]]] = {
    "anthropic": lambda s: _anthropic.tool_param(s)["input_schema"],
    "openai-chat": lambda s: openai_chat(s)["parameters"],
    "openai-responses": lambda s: _openai_responses.tool_param(s)["parameters"],
    "gemini": lambda s: _gemini.tool_declaration(s)["parametersJsonSchema"],
}


def keys(schema: object) -> Iterator[str]:
    if isinstance(schema, dict):
        for key, value in schema.items():
            yield key
            if key not in ("properties", "$defs", "definitions", "patternProperties"):
                yield from keys(value)
            else:
                for child in value.values():
                    yield from keys(child)
    elif isinstance(schema, list):
        for item in schema:
            yield from keys(item)


@pytest.mark.parametrize("server", SERVERS)
@pytest.mark.parametrize("provider", sorted(PROVIDERS))
def test_every_real_server_schema_translates_for_every_provider(server: str, provider: str) -> None:
    import re

    tools = specs(server)
    assert tools
    for spec in tools:
        assert re.match(NAME, spec.name)
        schema = PROVIDERS[provider](spec)
        assert schema["type"] == "object" and isinstance(schema["properties"], dict)
        json.dumps(schema)  # plain JSON
        if provider == "gemini":
            assert "$schema" not in set(keys(schema))  # an annotation Gemini refuses
        else:  # sent as the server wrote it
            assert schema == {"properties": {}, **spec.parameters}


def test_strict_mode_is_used_only_where_openai_can_express_the_schema() -> None:
    strict = {
        spec.name: _openai_responses.tool_param(spec)["strict"]
        for server in SERVERS
        for spec in specs(server)
    }
    # zod/pydantic schemas leave optional properties out of `required`: not strict
    assert strict["mcp__time__get_current_time"] is False
    assert not any(strict.values())


def mcp_spec(schema: dict[str, Any], name: str = "t") -> ToolSpec:
    return tool_info(
        McpServerConfig(name="s", command="x"), mt.Tool(name=name, input_schema=schema)
    ).spec


DRAFT7_REFS = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "type": "object",
    "properties": {"item": {"$ref": "#/definitions/Item"}},
    "required": ["item"],
    "definitions": {
        "Item": {
            "type": "object",
            "properties": {"id": {"type": "string", "format": "uuid"}},
            "additionalProperties": {"type": "string"},
        }
    },
}


def test_draft7_definitions_become_defs_for_gemini_with_the_same_meaning() -> None:
    schema = PROVIDERS["gemini"](mcp_spec(DRAFT7_REFS))
    assert schema["properties"]["item"] == {"$ref": "#/$defs/Item"}
    assert schema["$defs"] == DRAFT7_REFS["definitions"] and "definitions" not in schema
    for provider in ("anthropic", "openai-chat", "openai-responses"):
        assert PROVIDERS[provider](mcp_spec(DRAFT7_REFS))["definitions"]
    # the call itself is still checked against the server's schema
    spec = mcp_spec(DRAFT7_REFS)
    assert argument_errors(spec, {"item": {"id": "x", "extra": 1}}) != []


TAGGED = {
    "type": "object",
    "properties": {
        "action": {
            "oneOf": [
                {
                    "type": "object",
                    "properties": {"kind": {"const": "move"}, "to": {"type": "string"}},
                    "required": ["kind", "to"],
                },
                {
                    "type": "object",
                    "properties": {"kind": {"const": "delete"}},
                    "required": ["kind"],
                },
            ]
        },
        "when": {"anyOf": [{"type": "string", "format": "date-time"}, {"type": "null"}]},
    },
}


def test_a_oneof_that_cannot_overlap_is_sent_to_gemini_as_anyof() -> None:
    schema = PROVIDERS["gemini"](mcp_spec(TAGGED))
    assert "oneOf" not in schema["properties"]["action"]
    move, delete = schema["properties"]["action"]["anyOf"]
    assert move["properties"]["kind"] == {"enum": ["move"]}  # const, in Gemini's words
    assert delete["required"] == ["kind"]
    assert PROVIDERS["anthropic"](mcp_spec(TAGGED)) == TAGGED
    for branches in ([{"type": "integer"}, {"type": "number"}], [{"minimum": 1}, {}]):
        overlapping = {"type": "object", "properties": {"v": {"oneOf": branches}}}
        with pytest.raises(ConfigError) as info:
            PROVIDERS["gemini"](mcp_spec(overlapping))
        assert info.value.details["keyword"] == "oneOf"


def test_pattern_properties_are_refused_by_gemini_and_taken_by_the_others() -> None:
    schema = {
        "type": "object",
        "properties": {
            "env": {"type": "object", "patternProperties": {"^[A-Z_]+$": {"type": "string"}}}
        },
    }
    with pytest.raises(ConfigError) as info:
        PROVIDERS["gemini"](mcp_spec(schema, "setenv"))
    assert info.value.details == {
        "tool": "mcp__s__setenv",
        "keyword": "patternProperties",
        "provider": "gemini",
    }
    assert "#/properties/env" in info.value.message
    for provider in ("anthropic", "openai-chat", "openai-responses"):
        assert PROVIDERS[provider](mcp_spec(schema)) == schema


def test_a_combinator_at_the_root_is_refused_by_every_provider() -> None:
    rooted = {
        "type": "object",
        "anyOf": [{"required": ["path"]}, {"required": ["uri"]}],
        "properties": {"path": {"type": "string"}, "uri": {"type": "string"}},
    }
    for provider, translate in PROVIDERS.items():
        with pytest.raises(ConfigError, match="not one with 'anyOf' at the top level") as info:
            translate(mcp_spec(rooted, "open"))
        assert info.value.details["provider"] == provider.split("-")[0]
        assert info.value.details["tool"] == "mcp__s__open"


def test_large_enums_and_unknown_formats_turn_openai_strict_mode_off() -> None:
    def strict_with(prop: dict[str, Any]) -> bool:
        schema = {
            "type": "object",
            "properties": {"v": prop},
            "required": ["v"],
            "additionalProperties": False,
        }
        result: bool = _openai_responses.tool_param(mcp_spec(schema))["strict"]
        return result

    assert strict_with({"type": "string", "enum": ["a", "b"]}) is True
    assert strict_with({"type": "string", "format": "uuid"}) is True
    assert strict_with({"type": "string", "format": "uri"}) is False
    many = [f"value-{i:04d}" for i in range(1200)]
    assert strict_with({"type": "string", "enum": many}) is False
    long = [f"{i:03d}" + "x" * 60 for i in range(300)]
    assert strict_with({"type": "string", "enum": long}) is False
    # sent whole either way, and Gemini takes the large enum as it is
    gemini = PROVIDERS["gemini"](mcp_spec({"type": "object", "properties": {"v": {"enum": many}}}))
    assert gemini["properties"]["v"]["enum"] == many
