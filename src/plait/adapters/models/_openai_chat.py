"""OpenAI Chat Completions converter (also every OpenAI-compatible server: DeepSeek, vLLM,
Ollama, llama.cpp, OpenRouter, LM Studio, Gemini's OpenAI endpoint). Pure: Context →
request body, response body or stream chunks → ModelResponse. DeepSeek's
``reasoning_content`` and a tool call's ``extra_content`` (Gemini 3's
``extra_content.google.thought_signature``) are opaque state. A call that comes with an
empty id (Gemini's endpoint sends ``"id": ""``) gets a plait-made one."""

from __future__ import annotations

from typing import Any

from plait.adapters.models._common import (
    FOREIGN_THOUGHT_SIGNATURE,
    Target,
    correction_text,
    cut_off,
    fresh_call_id,
    iter_turns,
    result_text,
)
from plait.adapters.models._errors import classify
from plait.adapters.models._schema import answer_openai_strict, openai_strict
from plait.application.ports import ModelResponse, RawToolCall
from plait.domain.context import Context
from plait.domain.errors import ModelError, ModelErrorCode
from plait.domain.messages import AssistantMessage, Usage, UserMessage
from plait.domain.tools import ToolSpec

__all__ = ["ChatStream", "build_request", "parse_response", "tool_param"]


def tool_param(spec: ToolSpec) -> dict[str, Any]:
    schema, strict = openai_strict(spec)
    return {
        "type": "function",
        "function": {
            "name": spec.name,
            "description": spec.description,
            "parameters": schema,
            "strict": strict,
        },
    }


def _last_user_index(items: list[Any]) -> int:
    for index in range(len(items) - 1, -1, -1):
        if isinstance(items[index], UserMessage):
            return index
    return -1


def _call_extras(target: Target, state: dict[str, Any] | None) -> dict[str | None, Any]:
    """Each call's ``extra_content`` to hand back: the one it came with, or for a Gemini 3
    model and history it did not make, Google's stand-in signature."""
    if state is not None:
        kept = state.get("tool_extra")
        return dict(kept) if isinstance(kept, dict) else {}
    if "gemini-3" in target.model.lower():
        return {None: {"google": {"thought_signature": FOREIGN_THOUGHT_SIGNATURE}}}
    return {}


def _assistant(target: Target, message: AssistantMessage, in_current_turn: bool) -> dict[str, Any]:
    out: dict[str, Any] = {"role": "assistant", "content": message.text or None}
    state = target.own_state(message)
    extras = _call_extras(target, state)
    if message.tool_calls:
        out["tool_calls"] = []
        for tool_call in message.tool_calls:
            call: dict[str, Any] = {
                "id": tool_call.id,
                "type": "function",
                "function": {"name": tool_call.name, "arguments": tool_call.arguments_json},
            }
            extra = extras.get(tool_call.id, extras.get(None))
            if extra:
                call["extra_content"] = extra
            out["tool_calls"].append(call)
    # DeepSeek wants its reasoning back only inside the turn still using tools
    if state and in_current_turn and state.get("reasoning_content"):
        out["reasoning_content"] = state["reasoning_content"]
    return out


def build_request(
    target: Target,
    context: Context[Any],
    *,
    max_output_tokens: int | None = None,
    stream: bool = False,
    max_tokens_field: str = "max_completion_tokens",
) -> dict[str, Any]:
    messages: list[dict[str, Any]] = []
    if context.instructions:
        messages.append({"role": "system", "content": context.instructions})
    turns = list(iter_turns(context.items))
    current = _last_user_index(turns)
    for index, turn in enumerate(turns):
        if isinstance(turn, UserMessage):
            messages.append({"role": "user", "content": turn.text})
        elif isinstance(turn, AssistantMessage):
            messages.append(_assistant(target, turn, index > current))
        else:
            messages.extend(
                {"role": "tool", "tool_call_id": r.call_id, "content": result_text(r)} for r in turn
            )
    for correction in context.corrections:
        messages.append({"role": "assistant", "content": correction.rejected_text})
        messages.append({"role": "user", "content": correction_text(correction)})
    body: dict[str, Any] = {"model": target.model, "messages": messages}
    if context.tools:
        body["tools"] = [tool_param(t) for t in context.tools]
    if context.output_schema is not None:
        schema, strict = answer_openai_strict(context.output_schema)
        body["response_format"] = {
            "type": "json_schema",
            "json_schema": {"name": context.output_schema.name, "schema": schema, "strict": strict},
        }
    if max_output_tokens is not None:
        body[max_tokens_field] = max_output_tokens
    if stream:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    return body


def _int(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def parse_usage(raw: object) -> Usage:
    if not isinstance(raw, dict):
        return Usage()
    prompt = raw.get("prompt_tokens_details") or {}
    completion = raw.get("completion_tokens_details") or {}
    cached = _int(prompt.get("cached_tokens")) or _int(raw.get("prompt_cache_hit_tokens"))
    return Usage(
        input_tokens=_int(raw.get("prompt_tokens")),
        output_tokens=_int(raw.get("completion_tokens")),
        cached_input_tokens=cached,
        reasoning_tokens=_int(completion.get("reasoning_tokens")),
    )


def parse_response(target: Target, body: dict[str, Any], provider: str = "openai") -> ModelResponse:
    if body.get("error"):
        raise classify(provider, None, body)
    choices = body.get("choices")
    if not isinstance(choices, list) or not choices:
        raise ModelError(
            f"{provider}: the response has no choices",
            model_code=ModelErrorCode.TRANSIENT,
            status=None,
            body=body,
        )
    message = choices[0].get("message") or {}
    calls: list[RawToolCall] = []
    extras: dict[str, Any] = {}
    for tc in message.get("tool_calls") or ():
        call_id = tc.get("id") or fresh_call_id("call")
        function = tc.get("function") or {}
        calls.append(
            RawToolCall(
                id=call_id,
                name=function.get("name") or "",
                arguments=function.get("arguments") or "",
            )
        )
        if isinstance(tc.get("extra_content"), dict) and tc["extra_content"]:
            extras[call_id] = tc["extra_content"]
    reasoning = message.get("reasoning_content")
    return ModelResponse(
        text=message.get("content") or "",
        tool_calls=tuple(calls),
        usage=parse_usage(body.get("usage")),
        model=body.get("model") or target.model,
        vendor_state=target.state(reasoning_content=reasoning, tool_extra=extras),
    )


class ChatStream:
    """Accumulates ``chat.completion.chunk`` events into one response. ``feed`` returns
    the text delta to show; ``finish`` refuses a stream that never said it was done."""

    def __init__(self, target: Target, provider: str = "openai") -> None:
        self._target = target
        self._provider = provider
        self._text: list[str] = []
        self._reasoning: list[str] = []
        self._calls: dict[int, dict[str, Any]] = {}
        self._usage: object = None
        self._model: str | None = None
        self._finish: str | None = None

    def feed(self, chunk: dict[str, Any]) -> str | None:
        if chunk.get("error"):
            raise classify(self._provider, None, chunk)
        self._model = chunk.get("model") or self._model
        if chunk.get("usage"):
            self._usage = chunk["usage"]
        delta_text: str | None = None
        for choice in chunk.get("choices") or ():
            if choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") or {}
            if delta.get("content"):
                delta_text = delta["content"]
                self._text.append(delta_text)
            if delta.get("reasoning_content"):
                self._reasoning.append(delta["reasoning_content"])
            for tc in delta.get("tool_calls") or ():
                # Gemini's endpoint sends each call whole, without an index: a new call
                index = tc.get("index")
                if not isinstance(index, int):
                    index = max(self._calls, default=-1) + 1
                slot = self._calls.setdefault(
                    index, {"id": None, "name": "", "args": [], "extra": None}
                )
                slot["id"] = tc.get("id") or slot["id"]
                slot["extra"] = tc.get("extra_content") or slot["extra"]
                fn = tc.get("function") or {}
                slot["name"] += fn.get("name") or ""
                slot["args"].append(fn.get("arguments") or "")
            if choice.get("finish_reason"):
                self._finish = choice["finish_reason"]
        return delta_text

    def finish(self) -> ModelResponse:
        if self._finish is None:
            raise cut_off(self._provider, "no finish_reason")
        body = {
            "model": self._model,
            "usage": self._usage,
            "choices": [
                {
                    "message": {
                        "content": "".join(self._text),
                        "reasoning_content": "".join(self._reasoning) or None,
                        "tool_calls": [
                            {
                                "id": s["id"],
                                "function": {"name": s["name"], "arguments": "".join(s["args"])},
                                "extra_content": s["extra"],
                            }
                            for _, s in sorted(self._calls.items())
                        ],
                    }
                }
            ],
        }
        return parse_response(self._target, body, self._provider)
