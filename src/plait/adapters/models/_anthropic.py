"""Anthropic Messages converter. Pure. Thinking blocks (with their signatures) and
redacted thinking are opaque state, kept in their order among the text and tool-use
blocks, and handed back verbatim only to the same vendor and model family."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from plait.adapters.models._common import Target, correction_text, cut_off, iter_turns, result_text
from plait.adapters.models._errors import classify
from plait.adapters.models._schema import anthropic_schema
from plait.application.ports import ModelResponse, RawToolCall
from plait.domain.answers import OutputSchema
from plait.domain.context import Context
from plait.domain.messages import AssistantMessage, ToolStatus, Usage, UserMessage
from plait.domain.tools import ToolSpec

__all__ = [
    "ANSWER_TOOL",
    "DEFAULT_MAX_TOKENS",
    "MessagesStream",
    "answer_tool",
    "build_request",
    "parse_response",
    "take_answer",
]

DEFAULT_MAX_TOKENS = 8192
_THINKING = ("thinking", "redacted_thinking")


def tool_param(spec: ToolSpec) -> dict[str, Any]:
    return {
        "name": spec.name,
        "description": spec.description,
        "input_schema": anthropic_schema(spec),
    }


ANSWER_TOOL = "final_answer"
"""The tool a typed final answer is asked for through (Anthropic has no native JSON mode:
a forced tool call is its documented way to get JSON in a schema)."""


def _wrapped(answer: OutputSchema) -> bool:
    """A tool's input is an object: an answer of another type is wrapped in ``answer``."""
    return answer.schema().get("type") != "object"


def answer_tool(answer: OutputSchema) -> dict[str, Any]:
    schema = answer.schema()
    if _wrapped(answer):
        schema = {"type": "object", "properties": {"answer": schema}, "required": ["answer"]}
    return {
        "name": ANSWER_TOOL,
        "description": "Give your final answer (call this instead of replying in text).",
        "input_schema": schema,
    }


def take_answer(answer: OutputSchema, response: ModelResponse) -> ModelResponse:
    """The final-answer tool call of ``response`` as its answer (text: the JSON; the
    decoded value in ``structured``); the rest of the response is left as it is."""
    calls = [c for c in response.tool_calls if c.name == ANSWER_TOOL]
    if not calls:
        return response
    (call, *_) = calls
    value: Any = call.arguments
    if isinstance(value, str):
        try:
            value = json.loads(value or "{}")
        except ValueError:  # not JSON: the text fails validation, a correction follows
            return replace(response, text=value, tool_calls=())
    if _wrapped(answer) and isinstance(value, dict):
        value = value.get("answer")
    text = json.dumps(value, ensure_ascii=False)
    state = response.vendor_state
    if state is not None and isinstance(state.data.get("blocks"), list):
        blocks = [
            {"type": "text", "text": text}
            if b.get("type") == "tool_use" and b.get("id") == call.id
            else b
            for b in state.data["blocks"]
        ]
        state = replace(state, data={**state.data, "blocks": blocks})
    others = tuple(c for c in response.tool_calls if c.name != ANSWER_TOOL)
    if others:  # an answer beside real calls is no final answer: the calls go on
        return replace(response, tool_calls=others)
    return replace(response, text=text, tool_calls=(), structured=value, vendor_state=state)


def _assistant_content(target: Target, message: AssistantMessage) -> list[dict[str, Any]]:
    calls = {call.id: call for call in message.tool_calls}
    state = target.own_state(message)
    blocks: list[dict[str, Any]] = []
    if state:
        for block in state.get("blocks", ()):
            if block.get("type") in _THINKING or block.get("type") == "text":
                blocks.append(dict(block))
            elif block.get("type") == "tool_use" and block.get("id") in calls:
                call = calls.pop(block["id"])
                blocks.append(
                    {
                        "type": "tool_use",
                        "id": call.id,
                        "name": call.name,
                        "input": call.arguments(),
                    }
                )
    elif message.text:
        blocks.append({"type": "text", "text": message.text})
    blocks.extend(
        {"type": "tool_use", "id": call.id, "name": call.name, "input": call.arguments()}
        for call in message.tool_calls
        if call.id in calls
    )
    return blocks or [{"type": "text", "text": "(no reply)"}]


def _append(messages: list[dict[str, Any]], role: str, content: list[dict[str, Any]]) -> None:
    if messages and messages[-1]["role"] == role:
        messages[-1]["content"].extend(content)
    else:
        messages.append({"role": role, "content": content})


def build_request(
    target: Target,
    context: Context[Any],
    *,
    max_output_tokens: int | None = None,
    stream: bool = False,
    thinking_budget: int | None = None,
) -> dict[str, Any]:
    messages: list[dict[str, Any]] = []
    for turn in iter_turns(context.items):
        if isinstance(turn, UserMessage):
            _append(messages, "user", [{"type": "text", "text": turn.text or "(empty)"}])
        elif isinstance(turn, AssistantMessage):
            _append(messages, "assistant", _assistant_content(target, turn))
        else:
            _append(
                messages,
                "user",
                [
                    {
                        "type": "tool_result",
                        "tool_use_id": r.call_id,
                        "content": result_text(r),
                        "is_error": r.result.status is not ToolStatus.SUCCEEDED,
                    }
                    for r in turn
                ],
            )
    for correction in context.corrections:
        _append(
            messages,
            "assistant",
            [{"type": "text", "text": correction.rejected_text or "(empty reply)"}],
        )
        _append(messages, "user", [{"type": "text", "text": correction_text(correction)}])
    body: dict[str, Any] = {
        "model": target.model,
        "max_tokens": max_output_tokens or DEFAULT_MAX_TOKENS,
        "messages": messages,
    }
    if context.instructions:
        body["system"] = context.instructions
    if context.tools:
        body["tools"] = [tool_param(t) for t in context.tools]
    if context.output_schema is not None:
        body["tools"] = [*body.get("tools", ()), answer_tool(context.output_schema)]
        if thinking_budget:  # extended thinking takes no forced tool choice
            body["tool_choice"] = {"type": "auto"}
        elif context.tools:  # some tool (a real one, or the answer) must be called
            body["tool_choice"] = {"type": "any"}
        else:
            body["tool_choice"] = {"type": "tool", "name": ANSWER_TOOL}
    if thinking_budget:
        body["thinking"] = {"type": "enabled", "budget_tokens": thinking_budget}
    if stream:
        body["stream"] = True
    return body


def _int(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def parse_usage(raw: object) -> Usage:
    if not isinstance(raw, dict):
        return Usage()
    read = _int(raw.get("cache_read_input_tokens"))
    written = _int(raw.get("cache_creation_input_tokens"))
    return Usage(
        input_tokens=_int(raw.get("input_tokens")) + read + written,
        output_tokens=_int(raw.get("output_tokens")),
        cached_input_tokens=read,
    )


def parse_response(
    target: Target, body: dict[str, Any], provider: str = "anthropic"
) -> ModelResponse:
    if body.get("type") == "error":
        raise classify(provider, None, body)
    texts: list[str] = []
    calls: list[RawToolCall] = []
    blocks: list[dict[str, Any]] = []
    for block in body.get("content") or ():
        kind = block.get("type")
        if kind == "text":
            texts.append(block.get("text") or "")
            blocks.append({"type": "text", "text": block.get("text") or ""})
        elif kind == "thinking":
            blocks.append(
                {
                    "type": "thinking",
                    "thinking": block.get("thinking") or "",
                    "signature": block.get("signature") or "",
                }
            )
        elif kind == "redacted_thinking":
            blocks.append({"type": "redacted_thinking", "data": block.get("data") or ""})
        elif kind == "tool_use":
            calls.append(
                RawToolCall(
                    id=block.get("id"),
                    name=block.get("name") or "",
                    arguments=block.get("input") or {},
                )
            )
            blocks.append({"type": "tool_use", "id": block.get("id")})
    thinking = any(block["type"] in _THINKING for block in blocks)
    return ModelResponse(
        text="".join(texts),
        tool_calls=tuple(calls),
        usage=parse_usage(body.get("usage")),
        model=body.get("model") or target.model,
        vendor_state=target.state(blocks=blocks if thinking else None),
    )


class MessagesStream:
    """Accumulates Messages stream events into the message they describe."""

    def __init__(self, target: Target, provider: str = "anthropic") -> None:
        self._target = target
        self._provider = provider
        self._message: dict[str, Any] = {}
        self._blocks: dict[int, dict[str, Any]] = {}
        self._json: dict[int, list[str]] = {}
        self._stopped = False

    def feed(self, event: dict[str, Any]) -> str | None:
        kind = event.get("type")
        if kind == "error":
            raise classify(self._provider, None, event)
        if kind == "message_start":
            self._message = dict(event.get("message") or {})
        elif kind == "content_block_start":
            self._blocks[event.get("index", 0)] = dict(event.get("content_block") or {})
        elif kind == "content_block_delta":
            return self._delta(event.get("index", 0), event.get("delta") or {})
        elif kind == "message_delta":
            self._message.update(event.get("delta") or {})
            usage = dict(self._message.get("usage") or {})
            usage.update({k: v for k, v in (event.get("usage") or {}).items() if v is not None})
            self._message["usage"] = usage
        elif kind == "message_stop":
            self._stopped = True
        return None

    def _delta(self, index: int, delta: dict[str, Any]) -> str | None:
        block = self._blocks.setdefault(index, {"type": "text", "text": ""})
        kind = delta.get("type")
        if kind == "text_delta":
            block["text"] = (block.get("text") or "") + delta.get("text", "")
            return delta.get("text") or None
        if kind == "thinking_delta":
            block["thinking"] = (block.get("thinking") or "") + delta.get("thinking", "")
        elif kind == "signature_delta":
            block["signature"] = (block.get("signature") or "") + delta.get("signature", "")
        elif kind == "input_json_delta":
            self._json.setdefault(index, []).append(delta.get("partial_json", ""))
        return None

    def finish(self) -> ModelResponse:
        if not self._stopped:
            raise cut_off(self._provider, "no message_stop event")
        for index, parts in self._json.items():
            raw = "".join(parts).strip() or "{}"
            try:
                self._blocks[index]["input"] = json.loads(raw)
            except ValueError:
                self._blocks[index]["input"] = raw
        body = dict(self._message)
        body["content"] = [self._blocks[i] for i in sorted(self._blocks)]
        response = parse_response(self._target, body, self._provider)
        return response
