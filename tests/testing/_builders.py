"""Small builders shared by the plait.testing tests."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from plait.application.ports import ModelClient, ModelRequest, ModelResponse, ModelRole
from plait.domain.context import Context, Correction
from plait.domain.messages import (
    AssistantMessage,
    Message,
    ToolCall,
    ToolResult,
    ToolResultMessage,
    ToolStatus,
    UserMessage,
)
from plait.domain.tools import EffectClass, ToolSpec

T0 = 1_700_000_000.0

READ_FILE = ToolSpec(
    name="read_file",
    description="Read a file of the workspace.",
    parameters={
        "type": "object",
        "properties": {"path": {"type": "string"}},
        "required": ["path"],
        "additionalProperties": False,
    },
    effect=EffectClass.READ_ONLY,
)


def user(n: int, text: str = "hello") -> UserMessage:
    return UserMessage(id=f"msg_u{n}", text=text, created_at=T0 + n)


def assistant(n: int, text: str = "ok", *calls: ToolCall) -> AssistantMessage:
    return AssistantMessage(id=f"msg_a{n}", text=text, created_at=T0 + n, tool_calls=calls)


def tool_result(n: int, call_id: str, content: str = "data") -> ToolResultMessage:
    return ToolResultMessage(
        id=f"msg_t{n}",
        tool_name="read_file",
        result=ToolResult(call_id=call_id, status=ToolStatus.SUCCEEDED, content=content),
        created_at=T0 + n,
    )


def history(steps: int) -> list[Message]:
    """A user message followed by ``steps`` assistant messages, each with one tool call and
    its result."""
    items: list[Message] = [user(0)]
    for n in range(1, steps + 1):
        call = ToolCall.create(id=f"c{n}", name="read_file", arguments={"path": f"f{n}"})
        items += [assistant(n, "reading", call), tool_result(n, f"c{n}")]
    return items


def context(
    items: Sequence[Message] = (),
    *,
    tools: tuple[ToolSpec, ...] = (READ_FILE,),
    instructions: str = "You are a careful assistant.",
    corrections: int = 0,
) -> Context[Any]:
    return Context(
        instructions=instructions,
        tools=tools,
        items=list(items) or [user(0)],
        output_type=AssistantMessage,
        corrections=tuple(
            Correction(rejected_text="bad", problems=("invalid",)) for _ in range(corrections)
        ),
    )


def ask(
    model: ModelClient, ctx: Context[Any] | None = None, role: ModelRole = "assistant"
) -> ModelResponse:
    request = ModelRequest(role=role, context=ctx if ctx is not None else context())
    return asyncio.run(model.complete(request))


def write(directory: Path, name: str, text: str) -> Path:
    path = directory / name
    path.write_text(text, encoding="utf-8")
    return path
