"""Schemas made from typed tools are ones every provider adapter accepts."""

from __future__ import annotations

from enum import Enum
from typing import Annotated, Literal

from pydantic import BaseModel, Field

import plait
from plait.adapters.models._gemini import tool_declaration
from plait.adapters.models._schema import openai_strict
from plait.adapters.tools import SandboxSettings, command_tools, workspace_tools
from plait.application.compaction import RECALL_SPEC


class Colour(Enum):
    RED = "red"
    BLUE = "blue"


class Span(BaseModel):
    start: int
    end: int | None = None


@plait.tool(effect="idempotent")
def paint(
    path: str,
    colour: Colour,
    mode: Literal["fill", "stroke"] = "fill",
    spans: list[Span] | None = None,
    width: Annotated[int, Field(ge=1, le=64)] = 1,
) -> str:
    """Paint parts of a file.

    Args:
        path: The file.
        colour: Which colour.
    """
    return "painted"


@plait.tool(effect="read_only")
def exact(path: str, colour: Colour) -> str:
    """Everything required, nothing optional."""
    return path


def test_optional_arguments_are_plain_types_with_no_defs_or_titles() -> None:
    properties = paint.spec.parameters["properties"]
    assert properties["colour"] == {
        "type": "string",
        "description": "Which colour.",
        "enum": ["red", "blue"],
    }
    assert properties["spans"] == {
        "type": "array",
        "items": {
            "type": "object",
            "properties": {"start": {"type": "integer"}, "end": {"type": "integer"}},
            "required": ["start"],
        },
    }
    text = repr(paint.spec.parameters)
    assert "$defs" not in text and "$ref" not in text and "title" not in text
    assert "anyOf" not in text and "null" not in text


def test_typed_and_builtin_schemas_pass_every_provider_translation() -> None:
    tools = [
        *workspace_tools(),
        *command_tools(SandboxSettings(test_command="pytest")),
        paint,
        exact,
    ]
    for spec in [*(tool.spec for tool in tools), RECALL_SPEC]:
        tool_declaration(spec)  # Gemini: raises for a keyword it cannot express
        schema, _ = openai_strict(spec)
        assert schema["type"] == "object"
    assert openai_strict(exact.spec)[1] is True  # all required, no extras: strict mode
    assert openai_strict(paint.spec)[1] is False
