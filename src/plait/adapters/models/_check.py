"""``plait models check``: one minimal call that shows whether auth, tool calling and
streaming work with a model."""

from __future__ import annotations

from typing import Any

from plait.adapters.models._spec import open_model
from plait.application.ports import ModelRequest
from plait.domain.context import Context
from plait.domain.errors import ModelError
from plait.domain.messages import AssistantMessage, UserMessage
from plait.domain.tools import EffectClass, ToolSpec

__all__ = ["check_model"]

_PING = {"type": "object", "properties": {}, "additionalProperties": False}


async def check_model(spec: str) -> tuple[str, list[dict[str, Any]]]:
    """One minimal streamed call with one tool: (model name, one check per line: auth,
    tool calling, streaming, each ``{"check", "ok", "detail"}``)."""
    ping = ToolSpec(name="ping", description="Answers pong.", parameters=_PING,
                    effect=EffectClass.READ_ONLY)  # fmt: skip
    model = open_model(spec, tools=[ping])
    deltas: list[str] = []
    context: Context[Any] = Context(
        instructions="You are checking a connection. Call the ping tool once, nothing else.",
        tools=(ping,),
        items=[UserMessage(id="msg_check", text="Call ping.", created_at=0.0)],
        output_type=AssistantMessage,
    )
    streams = model.capabilities.streaming
    request = ModelRequest(role="assistant", context=context, max_output_tokens=256,
                           on_text=deltas.append if streams else None)  # fmt: skip
    try:
        response = await model.complete(request)
    except ModelError as e:
        failed = {"ok": False, "detail": f"{e.model_code}: {e.message}"}
        skipped = {"ok": False, "detail": "not checked (the call failed)"}
        return model.name, [{"check": "auth", **failed}, {"check": "tool calling", **skipped},
                            {"check": "streaming", **skipped}]  # fmt: skip
    called = [c.name for c in response.tool_calls]
    tool_ok = called == ["ping"]
    streamed = f"streamed ({len(deltas)} text deltas)"
    no_stream = "not declared for this model (set streaming = true in plait.toml if it can)"
    return model.name, [
        {"check": "auth", "ok": True, "detail": f"answered as {response.model or model.name}"},
        {
            "check": "tool calling",
            "ok": tool_ok,
            "detail": "called ping"
            if tool_ok
            else f"asked to call ping, got {called or 'no call'}",
        },
        {"check": "streaming", "ok": streams, "detail": streamed if streams else no_stream},
    ]
