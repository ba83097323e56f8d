"""Gemini (generateContent) converter, on the REST wire shape (camelCase, signatures as
base64 text). Pure. Thought signatures are opaque state kept per part, in order, and
handed back only to the same vendor and model family. Calls that come without an id get
a plait-made one, sent back in ``functionCall.id`` / ``functionResponse.id``."""

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
from plait.adapters.models._schema import answer_gemini_schema, gemini_schema
from plait.application.ports import ModelResponse, RawToolCall
from plait.domain.context import Context
from plait.domain.errors import ModelError, ModelErrorCode
from plait.domain.messages import AssistantMessage, ToolStatus, Usage, UserMessage
from plait.domain.tools import ToolSpec

__all__ = ["GenerateStream", "build_request", "parse_response", "tool_declaration"]


def tool_declaration(spec: ToolSpec) -> dict[str, Any]:
    return {
        "name": spec.name,
        "description": spec.description,
        "parametersJsonSchema": gemini_schema(spec),
    }


def _call_part(
    call_id: str, name: str, args: dict[str, Any], signature: str | None
) -> dict[str, Any]:
    part: dict[str, Any] = {"functionCall": {"id": call_id, "name": name, "args": args}}
    if signature:
        part["thoughtSignature"] = signature
    return part


def _model_parts(target: Target, message: AssistantMessage) -> list[dict[str, Any]]:
    calls = {call.id: call for call in message.tool_calls}
    state = target.own_state(message)
    parts: list[dict[str, Any]] = []
    if state:
        for part in state.get("parts", ()):
            if "functionCall" in part:
                call = calls.pop(part["functionCall"].get("id"), None)
                if call is not None:
                    parts.append(
                        _call_part(
                            call.id, call.name, call.arguments(), part.get("thoughtSignature")
                        )
                    )
            else:
                parts.append(dict(part))
    elif message.text:
        parts.append({"text": message.text})
    foreign = None if state else (FOREIGN_THOUGHT_SIGNATURE if "gemini-3" in target.model else None)
    parts.extend(
        _call_part(call.id, call.name, call.arguments(), foreign)
        for call in message.tool_calls
        if call.id in calls
    )
    return parts or [{"text": "(no reply)"}]


def build_request(
    target: Target,
    context: Context[Any],
    *,
    max_output_tokens: int | None = None,
) -> dict[str, Any]:
    contents: list[dict[str, Any]] = []
    for turn in iter_turns(context.items):
        if isinstance(turn, UserMessage):
            contents.append({"role": "user", "parts": [{"text": turn.text}]})
        elif isinstance(turn, AssistantMessage):
            contents.append({"role": "model", "parts": _model_parts(target, turn)})
        else:
            parts = []
            for result in turn:
                key = "output" if result.result.status is ToolStatus.SUCCEEDED else "error"
                parts.append(
                    {
                        "functionResponse": {
                            "id": result.call_id,
                            "name": result.tool_name,
                            "response": {key: result_text(result)},
                        }
                    }
                )
            contents.append({"role": "user", "parts": parts})
    for correction in context.corrections:
        contents.append(
            {"role": "model", "parts": [{"text": correction.rejected_text or "(empty reply)"}]}
        )
        contents.append({"role": "user", "parts": [{"text": correction_text(correction)}]})
    body: dict[str, Any] = {"contents": contents}
    if context.instructions:
        body["systemInstruction"] = {"parts": [{"text": context.instructions}]}
    if context.tools:
        body["tools"] = [{"functionDeclarations": [tool_declaration(t) for t in context.tools]}]
    config: dict[str, Any] = {}
    if max_output_tokens is not None:
        config["maxOutputTokens"] = max_output_tokens
    if context.output_schema is not None:
        config["responseMimeType"] = "application/json"
        config["responseJsonSchema"] = answer_gemini_schema(context.output_schema)
    if config:
        body["generationConfig"] = config
    return body


def _int(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def parse_usage(raw: object) -> Usage:
    if not isinstance(raw, dict):
        return Usage()
    thoughts = _int(raw.get("thoughtsTokenCount"))
    return Usage(
        input_tokens=_int(raw.get("promptTokenCount")),
        output_tokens=_int(raw.get("candidatesTokenCount")) + thoughts,
        cached_input_tokens=_int(raw.get("cachedContentTokenCount")),
        reasoning_tokens=thoughts,
    )


def parse_response(target: Target, body: dict[str, Any], provider: str = "gemini") -> ModelResponse:
    if body.get("error"):
        raise classify(provider, None, body)
    candidates = body.get("candidates") or ()
    if not candidates:
        reason = (body.get("promptFeedback") or {}).get("blockReason", "no candidates")
        raise ModelError(
            f"{provider}: the model returned no answer ({reason})",
            model_code=ModelErrorCode.INVALID_REQUEST,
            status=None,
            body=body,
        )
    texts: list[str] = []
    calls: list[RawToolCall] = []
    kept: list[dict[str, Any]] = []
    for part in (candidates[0].get("content") or {}).get("parts") or ():
        signature = part.get("thoughtSignature")
        if "functionCall" in part:
            fc = part["functionCall"]
            call_id = fc.get("id") or fresh_call_id("call")
            calls.append(
                RawToolCall(id=call_id, name=fc.get("name") or "", arguments=fc.get("args") or {})
            )
            kept.append(
                {
                    "functionCall": {"id": call_id},
                    **({"thoughtSignature": signature} if signature else {}),
                }
            )
        elif "text" in part:
            if not part.get("thought"):
                texts.append(part["text"])
            kept.append(
                {k: v for k, v in part.items() if k in ("text", "thought", "thoughtSignature")}
            )
    signed = any("thoughtSignature" in p for p in kept)
    return ModelResponse(
        text="".join(texts),
        tool_calls=tuple(calls),
        usage=parse_usage(body.get("usageMetadata")),
        model=body.get("modelVersion") or target.model,
        vendor_state=target.state(parts=kept if signed else None),
    )


class GenerateStream:
    """Accumulates streamed GenerateContentResponse chunks; the last one carries
    ``finishReason``."""

    def __init__(self, target: Target, provider: str = "gemini") -> None:
        self._target = target
        self._provider = provider
        self._parts: list[dict[str, Any]] = []
        self._last: dict[str, Any] = {}
        self._finished = False

    def feed(self, chunk: dict[str, Any]) -> str | None:
        if chunk.get("error"):
            raise classify(self._provider, None, chunk)
        self._last = chunk
        shown: list[str] = []
        for candidate in (chunk.get("candidates") or ())[:1]:
            for part in (candidate.get("content") or {}).get("parts") or ():
                self._add(part)
                if part.get("text") and not part.get("thought") and "functionCall" not in part:
                    shown.append(part["text"])
            if candidate.get("finishReason"):
                self._finished = True
        return "".join(shown) or None

    def _add(self, part: dict[str, Any]) -> None:
        prev = self._parts[-1] if self._parts else None
        mergeable = (
            prev is not None
            and "text" in part
            and "text" in prev
            and "thoughtSignature" not in part
            and "thoughtSignature" not in prev
            and bool(prev.get("thought")) == bool(part.get("thought"))
        )
        if mergeable and prev is not None:
            prev["text"] += part["text"]
        elif part.get("text") == "" and "thoughtSignature" not in part:
            return
        else:
            self._parts.append(dict(part))

    def finish(self) -> ModelResponse:
        if not self._finished:
            raise cut_off(self._provider, "no finishReason")
        body = dict(self._last)
        candidate = dict((body.get("candidates") or [{}])[0])
        candidate["content"] = {"role": "model", "parts": self._parts}
        body["candidates"] = [candidate]
        return parse_response(self._target, body, self._provider)
