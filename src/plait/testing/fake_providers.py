"""Fake model providers for tests: a loopback HTTP server answering in each provider's
recorded wire shape (OpenAI Chat Completions and Responses, Anthropic Messages, Gemini),
JSON or streamed, so the real SDK clients talk real HTTP to 127.0.0.1.

    with FakeProvider("openai", [FakeTurn(text="hi")]) as fake:
        model = open_model(f"openai-compatible:{fake.base_url}#any", ...)

Each :class:`FakeTurn` becomes one reply; :func:`rate_limited` and ``cut_after`` make the
failures a real provider produces (a 429 with retry-after, a stream cut off midway)."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from plait.domain.record import record
from plait.testing._fake_http import FakeHttpServer, RecordedRequest, Reply

__all__ = [
    "DIALECTS",
    "FakeHttpServer",
    "FakeProvider",
    "FakeTurn",
    "RecordedRequest",
    "Reply",
    "rate_limited",
]


@record(kw_only=True)
class FakeTurn:
    """One model answer: text and/or calls ``(id, name, arguments)``; ``thinking`` adds
    the provider's opaque reasoning (thinking block with signature, encrypted reasoning
    item, thought signature)."""

    text: str = ""
    calls: tuple[tuple[str, str, dict[str, Any]], ...] = ()
    thinking: bool = False
    input_tokens: int = 100
    output_tokens: int = 20


def _words(text: str) -> list[str]:
    """``text`` in streaming-sized pieces that join back to exactly ``text``."""
    return re.findall(r"\s*\S+\s*?(?=\s|$)|\s+$", text) or [text]


# --- OpenAI Chat Completions ------------------------------------------------------------


def _chat_json(turn: FakeTurn, model: str) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": turn.text or None}
    if turn.calls:
        message["tool_calls"] = [
            {"id": i, "type": "function", "function": {"name": n, "arguments": json.dumps(a)}}
            for i, n, a in turn.calls
        ]
    return {
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "created": 0,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": "tool_calls" if turn.calls else "stop",
            }
        ],
        "usage": {
            "prompt_tokens": turn.input_tokens,
            "completion_tokens": turn.output_tokens,
            "total_tokens": turn.input_tokens + turn.output_tokens,
        },
    }


def _chat_events(turn: FakeTurn, model: str) -> list[tuple[str | None, Any]]:
    def chunk(delta: dict[str, Any], finish: str | None = None) -> tuple[None, Any]:
        return None, {
            "id": "chatcmpl-fake",
            "object": "chat.completion.chunk",
            "created": 0,
            "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }

    out: list[tuple[str | None, Any]] = [chunk({"role": "assistant", "content": ""})]
    out += [chunk({"content": w}) for w in _words(turn.text)] if turn.text else []
    for index, (call_id, name, args) in enumerate(turn.calls):
        text = json.dumps(args)
        head = {
            "index": index,
            "id": call_id,
            "type": "function",
            "function": {"name": name, "arguments": ""},
        }
        out.append(chunk({"tool_calls": [head]}))
        for piece in (text[: len(text) // 2], text[len(text) // 2 :]):
            out.append(chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]}))
    out.append(chunk({}, "tool_calls" if turn.calls else "stop"))
    usage = _chat_json(turn, model)["usage"]
    out.append(
        (
            None,
            {
                "id": "chatcmpl-fake",
                "object": "chat.completion.chunk",
                "created": 0,
                "model": model,
                "choices": [],
                "usage": usage,
            },
        )
    )
    return out


# --- OpenAI Responses -------------------------------------------------------------------


def _responses_json(turn: FakeTurn, model: str) -> dict[str, Any]:
    output: list[dict[str, Any]] = []
    if turn.thinking:
        output.append(
            {
                "type": "reasoning",
                "id": "rs_fake",
                "summary": [],
                "encrypted_content": "gAAAAfake-encrypted-reasoning",
            }
        )
    if turn.text:
        content = [{"type": "output_text", "text": turn.text, "annotations": []}]
        output.append(
            {
                "type": "message",
                "id": "msg_fake",
                "role": "assistant",
                "status": "completed",
                "content": content,
            }
        )
    for call_id, name, args in turn.calls:
        output.append(
            {
                "type": "function_call",
                "id": f"fc_{call_id}",
                "call_id": call_id,
                "name": name,
                "arguments": json.dumps(args),
                "status": "completed",
            }
        )
    return {
        "id": "resp_fake",
        "object": "response",
        "created_at": 0,
        "status": "completed",
        "model": model,
        "output": output,
        "usage": {
            "input_tokens": turn.input_tokens,
            "output_tokens": turn.output_tokens,
            "total_tokens": turn.input_tokens + turn.output_tokens,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens_details": {"reasoning_tokens": 7 if turn.thinking else 0},
        },
    }


def _responses_events(turn: FakeTurn, model: str) -> list[tuple[str | None, Any]]:
    final = _responses_json(turn, model)
    started = {**final, "status": "in_progress", "output": [], "usage": None}
    out: list[tuple[str | None, Any]] = [
        (
            "response.created",
            {"type": "response.created", "sequence_number": 0, "response": started},
        )
    ]
    for word in _words(turn.text) if turn.text else []:
        out.append(
            (
                "response.output_text.delta",
                {
                    "type": "response.output_text.delta",
                    "item_id": "msg_fake",
                    "output_index": 0,
                    "delta": word,
                },
            )
        )
    out.append(("response.completed", {"type": "response.completed", "response": final}))
    return out


# --- Anthropic Messages -----------------------------------------------------------------


def _anthropic_blocks(turn: FakeTurn) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    if turn.thinking:
        blocks.append({"type": "thinking", "thinking": "Let me think.", "signature": "EqFAKEsig=="})
    if turn.text:
        blocks.append({"type": "text", "text": turn.text})
    blocks += [{"type": "tool_use", "id": i, "name": n, "input": a} for i, n, a in turn.calls]
    return blocks


def _anthropic_json(turn: FakeTurn, model: str) -> dict[str, Any]:
    return {
        "id": "msg_fake",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": _anthropic_blocks(turn),
        "stop_reason": "tool_use" if turn.calls else "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": turn.input_tokens, "output_tokens": turn.output_tokens},
    }


def _anthropic_block_events(index: int, block: dict[str, Any]) -> list[tuple[str | None, Any]]:
    kind = block["type"]
    start = {
        "thinking": {"type": "thinking", "thinking": "", "signature": ""},
        "text": {"type": "text", "text": ""},
        "tool_use": {
            "type": "tool_use",
            "id": block.get("id"),
            "name": block.get("name"),
            "input": {},
        },
    }[kind]
    if kind == "thinking":
        deltas = [
            {"type": "thinking_delta", "thinking": block["thinking"]},
            {"type": "signature_delta", "signature": block["signature"]},
        ]
    elif kind == "text":
        deltas = [{"type": "text_delta", "text": w} for w in _words(block["text"])]
    else:
        deltas = [{"type": "input_json_delta", "partial_json": json.dumps(block["input"])}]
    out: list[tuple[str | None, Any]] = [
        (
            "content_block_start",
            {"type": "content_block_start", "index": index, "content_block": start},
        )
    ]
    out += [
        ("content_block_delta", {"type": "content_block_delta", "index": index, "delta": d})
        for d in deltas
    ]
    out.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
    return out


def _anthropic_events(turn: FakeTurn, model: str) -> list[tuple[str | None, Any]]:
    message = {
        **_anthropic_json(turn, model),
        "content": [],
        "stop_reason": None,
        "usage": {"input_tokens": turn.input_tokens, "output_tokens": 1},
    }
    out: list[tuple[str | None, Any]] = [
        ("message_start", {"type": "message_start", "message": message})
    ]
    for index, block in enumerate(_anthropic_blocks(turn)):
        out += _anthropic_block_events(index, block)
    stop = "tool_use" if turn.calls else "end_turn"
    out.append(
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": stop},
                "usage": {"output_tokens": turn.output_tokens},
            },
        )
    )
    out.append(("message_stop", {"type": "message_stop"}))
    return out


# --- Gemini -----------------------------------------------------------------------------


def _gemini_json(turn: FakeTurn, model: str) -> dict[str, Any]:
    parts: list[dict[str, Any]] = []
    if turn.text:
        parts.append({"text": turn.text})
    for index, (_, name, args) in enumerate(turn.calls):
        part: dict[str, Any] = {"functionCall": {"name": name, "args": args}}  # no id, as Gemini
        if turn.thinking and index == 0:
            part["thoughtSignature"] = "CrwEARFNMg9kFAKEsig0000A"
        parts.append(part)
    return {
        "candidates": [
            {"content": {"role": "model", "parts": parts}, "finishReason": "STOP", "index": 0}
        ],
        "usageMetadata": {
            "promptTokenCount": turn.input_tokens,
            "candidatesTokenCount": turn.output_tokens,
            "totalTokenCount": turn.input_tokens + turn.output_tokens,
        },
        "modelVersion": model,
        "responseId": "fake",
    }


def _gemini_events(turn: FakeTurn, model: str) -> list[tuple[str | None, Any]]:
    whole = _gemini_json(turn, model)
    usage, parts = whole["usageMetadata"], whole["candidates"][0]["content"]["parts"]
    out: list[tuple[str | None, Any]] = []
    for part in parts:
        pieces = [{"text": w} for w in _words(part["text"])] if "text" in part else [part]
        for piece in pieces:
            out.append(
                (
                    None,
                    {
                        "candidates": [
                            {"content": {"role": "model", "parts": [piece]}, "index": 0}
                        ],
                        "usageMetadata": usage,
                        "modelVersion": model,
                    },
                )
            )
    out.append(
        (
            None,
            {
                "candidates": [
                    {
                        "content": {"role": "model", "parts": [{"text": ""}]},
                        "finishReason": "STOP",
                        "index": 0,
                    }
                ],
                "usageMetadata": usage,
                "modelVersion": model,
            },
        )
    )
    return out


@record
class Dialect:
    name: str
    json: Any
    events: Any


DIALECTS = {
    "openai": Dialect("openai", _chat_json, _chat_events),
    "openai-responses": Dialect("openai-responses", _responses_json, _responses_events),
    "anthropic": Dialect("anthropic", _anthropic_json, _anthropic_events),
    "gemini": Dialect("gemini", _gemini_json, _gemini_events),
}


def rate_limited(dialect: str, *, retry_after_ms: int = 50) -> Reply:
    """A 429 in the provider's error shape with ``retry-after-ms`` and ``retry-after``."""
    bodies: dict[str, dict[str, Any]] = {
        "openai": {
            "error": {
                "message": "Rate limit reached. Please try again in 1s.",
                "type": "requests",
                "code": "rate_limit_exceeded",
            }
        },
        "openai-responses": {
            "error": {
                "message": "Rate limit reached.",
                "type": "requests",
                "code": "rate_limit_exceeded",
            }
        },
        "anthropic": {
            "type": "error",
            "error": {"type": "rate_limit_error", "message": "Number of requests exceeded"},
        },
        "gemini": {
            "error": {
                "code": 429,
                "status": "RESOURCE_EXHAUSTED",
                "message": "Resource has been exhausted",
            }
        },
    }
    body = bodies[dialect]
    headers = {"retry-after-ms": str(retry_after_ms), "retry-after": "1"}
    return Reply(status=429, body=body, headers=headers)


class FakeProvider:
    """A fake server for one provider dialect: ``turns`` become replies (JSON, or a stream
    when the request asks for one), after any ``replies`` given first."""

    def __init__(
        self, dialect: str, turns: Sequence[FakeTurn], *, model: str = "fake-model"
    ) -> None:
        self.dialect = DIALECTS[dialect]
        self.model = model
        self._turns = list(turns)
        self._first: list[Reply] = []
        self.cut_stream_at: dict[int, int] = {}
        """Turn index -> events sent before the stream of that turn is cut off (once)."""
        self.server = FakeHttpServer(reply_for=self._reply)
        self.served = 0

    def fail_first(self, *replies: Reply) -> None:
        self._first.extend(replies)

    @property
    def requests(self) -> list[RecordedRequest]:
        return self.server.requests

    @property
    def base_url(self) -> str:
        return self.server.url + ("/v1" if self.dialect.name != "gemini" else "")

    def _reply(self, request: RecordedRequest) -> Reply:
        if self._first:
            return self._first.pop(0)
        if self.served >= len(self._turns):
            return Reply(status=500, body={"error": {"message": "fake provider: script done"}})
        turn = self._turns[self.served]
        stream = (isinstance(request.body, dict) and request.body.get("stream") is True) or (
            "streamGenerateContent" in request.path
        )
        if stream:
            cut = self.cut_stream_at.pop(self.served, None)
            events = tuple(self.dialect.events(turn, self.model))
            if cut is not None:
                return Reply(events=events, cut_after=cut)
            self.served += 1
            return Reply(events=events)
        self.served += 1
        return Reply(body=self.dialect.json(turn, self.model))

    def __enter__(self) -> FakeProvider:
        self.server.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.close()
