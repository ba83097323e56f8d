"""Recorded provider exchanges (tests/adapters/fixtures/providers, see its README) and
small builders to turn them into plait histories."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from plait.adapters.models._sse import iter_events
from plait.application.ports import ModelResponse
from plait.application.validation import check_output
from plait.domain.context import Context
from plait.domain.messages import (
    AssistantMessage,
    Message,
    ToolResult,
    ToolResultMessage,
    ToolStatus,
    UserMessage,
)
from plait.domain.tools import ToolSpec

FIXTURES = Path(__file__).parent / "fixtures" / "providers"
T0 = 1_700_000_000.0


def cassette(name: str) -> list[dict[str, Any]]:
    data = yaml.safe_load((FIXTURES / name).read_text())
    interactions: list[dict[str, Any]] = data["interactions"]
    return interactions


def request_body(interaction: dict[str, Any]) -> dict[str, Any]:
    body: dict[str, Any] = interaction["request"]["parsed_body"]
    return body


def response_body(interaction: dict[str, Any]) -> dict[str, Any]:
    body: dict[str, Any] = interaction["response"]["parsed_body"]
    return body


def response_events(interaction: dict[str, Any]) -> list[dict[str, Any]]:
    raw: str = interaction["response"]["body"]["string"]
    return list(iter_events(raw.splitlines()))


def overflow_cases() -> list[dict[str, Any]]:
    data = json.loads((FIXTURES / "errors" / "context_overflow.json").read_text())
    cases: list[dict[str, Any]] = data["cases"]
    return cases


def tool(name: str, schema: dict[str, Any], description: str = "") -> ToolSpec:
    return ToolSpec(name=name, description=description, parameters=schema)


def no_args_tool(name: str) -> ToolSpec:
    """A tool that takes no arguments, declared the way the recordings declare one."""
    return tool(name, {"type": "object", "properties": {}, "additionalProperties": False})


def user(text: str, n: int = 0) -> UserMessage:
    return UserMessage(id=f"msg_u{n}", text=text, created_at=T0 + n)


def assistant(response: ModelResponse, tools: tuple[ToolSpec, ...], n: int = 1) -> AssistantMessage:
    """The assistant message the loop would persist for ``response``."""
    checked = check_output(response, {t.name: t for t in tools}, set())
    assert checked.ok, checked.problems
    return AssistantMessage(
        id=f"msg_a{n}",
        text=response.text,
        created_at=T0 + n,
        tool_calls=checked.calls,
        model=response.model,
        usage=response.usage,
        vendor_state=response.vendor_state,
    )


def results(message: AssistantMessage, outputs: list[str], n: int = 2) -> list[ToolResultMessage]:
    return [
        ToolResultMessage(
            id=f"msg_r{n}_{i}",
            tool_name=call.name,
            result=ToolResult(call_id=call.id, status=ToolStatus.SUCCEEDED, content=out),
            created_at=T0 + n,
        )
        for i, (call, out) in enumerate(zip(message.tool_calls, outputs, strict=True))
    ]


def context(
    instructions: str, tools: tuple[ToolSpec, ...], items: Sequence[Message]
) -> Context[Any]:
    return Context(
        instructions=instructions, tools=tools, items=items, output_type=AssistantMessage
    )


def without_none(value: Any) -> Any:
    """Recorded requests spell absent fields as ``null`` in places; compare without them."""
    if isinstance(value, dict):
        return {k: without_none(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [without_none(v) for v in value]
    return value
