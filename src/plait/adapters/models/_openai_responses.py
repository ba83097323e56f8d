"""OpenAI Responses converter. Pure. Reasoning items (with ``encrypted_content``) are kept
verbatim as opaque state, in their order among the message's output items, and handed
back only to the same vendor and model family; requests are stateless (``store: false``)
because plait holds the history."""

from __future__ import annotations

from typing import Any

from plait.adapters.models._common import Target, correction_text, cut_off, iter_turns, result_text
from plait.adapters.models._errors import classify
from plait.adapters.models._schema import answer_openai_strict, openai_strict
from plait.application.ports import ModelResponse, RawToolCall
from plait.domain.context import Context
from plait.domain.messages import AssistantMessage, ToolCall, Usage, UserMessage
from plait.domain.tools import ToolSpec

__all__ = ["ResponsesStream", "build_request", "parse_response", "tool_param"]


def tool_param(spec: ToolSpec) -> dict[str, Any]:
    schema, strict = openai_strict(spec)
    # Responses defaults to strict: say it either way
    return {
        "type": "function",
        "name": spec.name,
        "description": spec.description,
        "parameters": schema,
        "strict": strict,
    }


def _call_item(call: ToolCall, item_id: str | None) -> dict[str, Any]:
    item: dict[str, Any] = {
        "type": "function_call",
        "call_id": call.id,
        "name": call.name,
        "arguments": call.arguments_json,
    }
    if item_id:
        item["id"] = item_id
    return item


def _assistant_items(target: Target, message: AssistantMessage) -> list[dict[str, Any]]:
    state = target.own_state(message)
    calls = {c.id: c for c in message.tool_calls}
    out: list[dict[str, Any]] = []
    text_done = False
    for entry in (state or {}).get("order", ()):
        kind = entry.get("type")
        if kind == "reasoning":
            out.append(dict(entry))
        elif kind == "message" and message.text and not text_done:
            out.append({"role": "assistant", "content": message.text})
            text_done = True
        elif kind == "function_call" and entry.get("call_id") in calls:
            out.append(_call_item(calls.pop(entry["call_id"]), entry.get("id")))
    if message.text and not text_done:
        out.append({"role": "assistant", "content": message.text})
    out.extend(_call_item(c, None) for c in message.tool_calls if c.id in calls)
    return out


def build_request(
    target: Target,
    context: Context[Any],
    *,
    max_output_tokens: int | None = None,
    stream: bool = False,
    reasoning: bool = False,
) -> dict[str, Any]:
    items: list[dict[str, Any]] = []
    for turn in iter_turns(context.items):
        if isinstance(turn, UserMessage):
            items.append({"role": "user", "content": turn.text})
        elif isinstance(turn, AssistantMessage):
            items.extend(_assistant_items(target, turn))
        else:
            items.extend(
                {"type": "function_call_output", "call_id": r.call_id, "output": result_text(r)}
                for r in turn
            )
    for correction in context.corrections:
        items.append({"role": "assistant", "content": correction.rejected_text})
        items.append({"role": "user", "content": correction_text(correction)})
    body: dict[str, Any] = {"model": target.model, "input": items, "store": False}
    if context.instructions:
        body["instructions"] = context.instructions
    if context.tools:
        body["tools"] = [tool_param(t) for t in context.tools]
    if context.output_schema is not None:
        schema, strict = answer_openai_strict(context.output_schema)
        name = context.output_schema.name
        text_format = {"type": "json_schema", "name": name, "schema": schema, "strict": strict}
        body["text"] = {"format": text_format}
    if reasoning:
        body["include"] = ["reasoning.encrypted_content"]
    if max_output_tokens is not None:
        body["max_output_tokens"] = max_output_tokens
    if stream:
        body["stream"] = True
    return body


def _int(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def parse_usage(raw: object) -> Usage:
    if not isinstance(raw, dict):
        return Usage()
    return Usage(
        input_tokens=_int(raw.get("input_tokens")),
        output_tokens=_int(raw.get("output_tokens")),
        cached_input_tokens=_int((raw.get("input_tokens_details") or {}).get("cached_tokens")),
        reasoning_tokens=_int((raw.get("output_tokens_details") or {}).get("reasoning_tokens")),
    )


def parse_response(target: Target, body: dict[str, Any], provider: str = "openai") -> ModelResponse:
    if body.get("status") == "failed" or (body.get("error") and not body.get("output")):
        raise classify(provider, None, body.get("error") or body)
    texts: list[str] = []
    calls: list[RawToolCall] = []
    order: list[dict[str, Any]] = []
    for item in body.get("output") or ():
        kind = item.get("type")
        if kind == "reasoning":
            order.append(
                {
                    k: v
                    for k, v in item.items()
                    if k in ("type", "id", "encrypted_content", "summary")
                }
            )
        elif kind == "message":
            texts.extend(
                p.get("text") or ""
                for p in item.get("content") or ()
                if p.get("type") == "output_text"
            )
            order.append({"type": "message"})
        elif kind == "function_call":
            calls.append(
                RawToolCall(
                    id=item.get("call_id"),
                    name=item.get("name") or "",
                    arguments=item.get("arguments") or "",
                )
            )
            order.append(
                {"type": "function_call", "call_id": item.get("call_id"), "id": item.get("id")}
            )
    has_reasoning = any(e["type"] == "reasoning" for e in order)
    return ModelResponse(
        text="".join(texts),
        tool_calls=tuple(calls),
        usage=parse_usage(body.get("usage")),
        model=body.get("model") or target.model,
        vendor_state=target.state(order=order if has_reasoning else None),
    )


class ResponsesStream:
    """Accumulates Responses stream events; the final ``response.completed`` (or
    ``response.incomplete``) event carries the whole response."""

    def __init__(self, target: Target, provider: str = "openai") -> None:
        self._target = target
        self._provider = provider
        self._final: dict[str, Any] | None = None

    def feed(self, event: dict[str, Any]) -> str | None:
        kind = event.get("type")
        if kind in ("error", "response.failed"):
            raise classify(self._provider, None, event)
        if kind == "response.output_text.delta":
            delta = event.get("delta")
            return delta if isinstance(delta, str) and delta else None
        if kind in ("response.completed", "response.incomplete"):
            self._final = event.get("response") or {}
        return None

    def finish(self) -> ModelResponse:
        if self._final is None:
            raise cut_off(self._provider, "no response.completed event")
        return parse_response(self._target, self._final, self._provider)
