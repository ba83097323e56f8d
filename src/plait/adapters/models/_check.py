"""``plait models check``: one minimal call that shows whether auth, tool calling and
streaming work with a model, each told apart: a server that refuses the tool gets a
second call without it, and one that refuses streaming is answered plainly (the client
falls back) and reported as not streaming."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from plait.adapters.models._spec import open_model
from plait.application.ports import ModelClient, ModelRequest, ModelResponse
from plait.domain.context import Context
from plait.domain.errors import ModelError, ModelErrorCode, ModelTimeoutError
from plait.domain.messages import AssistantMessage, UserMessage
from plait.domain.tools import EffectClass, ToolSpec

if TYPE_CHECKING:
    from plait.config import Config

__all__ = ["check_model"]

_PING = {"type": "object", "properties": {}, "additionalProperties": False}


def _request(tools: tuple[ToolSpec, ...], deltas: list[str] | None) -> ModelRequest:
    ask = "Call ping." if tools else "Answer with the word pong."
    context: Context[Any] = Context(
        instructions="You are checking a connection. Call the ping tool once, nothing else."
        if tools
        else "You are checking a connection. Answer with one word.",
        tools=tools,
        items=[UserMessage(id="msg_check", text=ask, created_at=0.0)],
        output_type=AssistantMessage,
    )
    on_text = deltas.append if deltas is not None else None
    return ModelRequest(role="assistant", context=context, max_output_tokens=256, on_text=on_text)


def _failed(error: ModelError) -> dict[str, Any]:
    code = error.code if isinstance(error, ModelTimeoutError) else error.model_code
    return {"ok": False, "detail": f"{code}: {error.message}"}


def _streaming(model: ModelClient, deltas: list[str]) -> dict[str, Any]:
    if not model.capabilities.streaming:
        detail = "not declared for this model (set streaming = true in plait.toml if it can)"
        return {"check": "streaming", "ok": False, "detail": detail}
    refusal = getattr(model, "stream_refusal", None)
    if refusal:
        detail = f"the server refused a streamed call ({refusal}); plait calls it plainly"
        return {"check": "streaming", "ok": False, "detail": detail}
    return {"check": "streaming", "ok": True, "detail": f"streamed ({len(deltas)} text deltas)"}


def _auth_ok(model: ModelClient, response: ModelResponse) -> dict[str, Any]:
    return {"check": "auth", "ok": True, "detail": f"answered as {response.model or model.name}"}


async def check_model(
    spec: str, *, config: Config, env: Mapping[str, str]
) -> tuple[str, list[dict[str, Any]]]:
    """One minimal streamed call with one tool: (model name, one check per line: auth,
    tool calling, streaming, each ``{"check", "ok", "detail"}``). A call refused as an
    invalid request is made again without the tool, to tell a server that cannot take
    tools from one that does not answer at all."""
    ping = ToolSpec(
        name="ping", description="Answers pong.", parameters=_PING, effect=EffectClass.READ_ONLY
    )
    model = open_model(spec, tools=[ping], config=config, env=env)
    deltas: list[str] = []
    streams = model.capabilities.streaming
    try:
        response = await model.complete(_request((ping,), deltas if streams else None))
    except ModelError as exc:
        if exc.model_code == ModelErrorCode.INVALID_REQUEST:
            return model.name, await _without_tools(model, exc)
        skipped = {"ok": False, "detail": "not checked (the call failed)"}
        return model.name, [
            {"check": "auth", **_failed(exc)},
            {"check": "tool calling", **skipped},
            {"check": "streaming", **skipped},
        ]
    called = [c.name for c in response.tool_calls]
    tool_ok = called == ["ping"]
    got = "called ping" if tool_ok else f"asked to call ping, got {called or 'no call'}"
    return model.name, [
        _auth_ok(model, response),
        {"check": "tool calling", "ok": tool_ok, "detail": got},
        _streaming(model, deltas),
    ]


async def _without_tools(model: ModelClient, refused: ModelError) -> list[dict[str, Any]]:
    deltas: list[str] = []
    streams = model.capabilities.streaming
    try:
        response = await model.complete(_request((), deltas if streams else None))
    except ModelError as exc:
        skipped = {"ok": False, "detail": "not checked (the call failed, with and without a tool)"}
        return [
            {"check": "auth", **_failed(exc)},
            {"check": "tool calling", **skipped},
            {"check": "streaming", **skipped},
        ]
    return [
        _auth_ok(model, response),
        {"check": "tool calling", **_failed(refused)},
        _streaming(model, deltas),
    ]
