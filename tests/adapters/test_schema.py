"""Tool schemas per provider: strict where expressible, refused where inexpressible."""

from __future__ import annotations

from typing import Any

import pytest

from plait.adapters.models._gemini import tool_declaration
from plait.adapters.models._schema import openai_strict
from plait.adapters.tools import workspace_tools
from plait.domain.errors import ConfigError
from tests.adapters._cassettes import tool

NESTED: dict[str, Any] = {
    "type": "object",
    "properties": {},
    "additionalProperties": False,
    "required": [],
}
STRICT: dict[str, Any] = {
    "type": "object",
    "properties": {
        "a": {"type": "string"},
        "b": NESTED,
    },
    "required": ["a", "b"],
    "additionalProperties": False,
}


def test_openai_strict_only_when_every_object_qualifies() -> None:
    assert openai_strict(tool("t", STRICT))[1] is True
    optional = {**STRICT, "required": ["a"]}
    schema, strict = openai_strict(tool("t", optional))
    assert strict is False and schema == optional  # never loosened, never rewritten
    open_nested = {**STRICT, "properties": {"a": {"type": "string"}, "b": {"type": "object"}}}
    assert openai_strict(tool("t", open_nested))[1] is False
    length = {
        **STRICT,
        "properties": {"a": {"type": "string", "minLength": 1}, "b": NESTED},
    }
    assert openai_strict(tool("t", length))[1] is False


def test_gemini_refuses_a_keyword_outside_its_subset_naming_tool_and_keyword() -> None:
    spec = tool(
        "pick", {"type": "object", "properties": {"n": {"type": "integer", "multipleOf": 2}}}
    )
    with pytest.raises(ConfigError) as info:
        tool_declaration(spec)
    assert info.value.details == {"tool": "pick", "keyword": "multipleOf", "provider": "gemini"}
    assert "'pick'" in info.value.message and "'multipleOf'" in info.value.message
    assert "#/properties/n" in info.value.message


def test_gemini_takes_the_builtin_tools_and_drops_only_annotations() -> None:
    for t in workspace_tools():
        tool_declaration(t.spec)
    spec = tool(
        "t",
        {
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "type": "object",
            "properties": {},
        },
    )
    assert "$schema" not in tool_declaration(spec)["parametersJsonSchema"]
