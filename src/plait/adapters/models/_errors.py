"""Provider errors normalized to the codes of docs/design.md#models. Pure: the thin clients hand
over the HTTP status (``None`` for an error that arrived inside a stream), the decoded body or
event, and the response headers; the original body stays on the error for the user."""

from __future__ import annotations

import email.utils
import json
import re
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from plait.domain.errors import ModelError, ModelErrorCode

__all__ = ["classify", "error_texts", "retry_after_from"]

Code = ModelErrorCode

# Codes and phrasings of requests that do not fit, per server (the recorded bodies and
# their sources: tests/adapters/fixtures/providers/errors/overflow_vectors.json).
_OVERFLOW_CODES = frozenset(
    {
        "context_length_exceeded",  # OpenAI, Azure OpenAI, Groq, ...
        "string_above_max_length",  # OpenAI: one message over its size limit
        "exceed_context_size_error",  # llama.cpp server
        "request_too_large",  # Anthropic's 413: the request is over the size limit
    }
)
_OVERFLOW_TEXT = re.compile(
    r"maximum context length|context window|prompt is too long|context[_ ]length"
    r"|input token count \(\d+\) exceeds the maximum|exceeds the maximum number of tokens"
    r"|too many tokens in (the )?(prompt|input)|input is too long|reduce the length of the"
    r"|exceeds? (the )?(available )?context (limit|size|length|window)"  # Anthropic, llama.cpp
    r"|does not fit in (the )?context|context (the )?overflows"  # LM Studio
    r"|`?inputs`? tokens \+ `?max_new_tokens`? must be|`?inputs`? must have less than \d+ tokens"
    r"|longer than the maximum model length",  # vLLM's decoder prompt check
    re.IGNORECASE,
)
_RATE = frozenset(
    {
        "rate_limit_exceeded",
        "rate_limit_error",
        "resource_exhausted",
        "tokens",
        "requests",
        "insufficient_quota",
    }
)
_AUTH = frozenset(
    {
        "authentication_error",
        "permission_error",
        "invalid_api_key",
        "unauthenticated",
        "permission_denied",
        "unauthorized",
    }
)
_TRANSIENT = frozenset(
    {
        "overloaded_error",
        "api_error",
        "server_error",
        "internal",
        "unavailable",
        "deadline_exceeded",
        "internal_server_error",
        "timeout",
        "aborted",
    }
)
_TRY_AGAIN = re.compile(r"try again in (\d+(?:\.\d+)?)\s*(ms|s)\b", re.IGNORECASE)


def error_texts(payload: object) -> tuple[list[str], list[str]]:
    """(codes, messages) found anywhere in an error payload: ``error.code``,
    ``error.type``, ``error.status``, ``message``, OpenRouter's ``metadata.raw``..."""
    codes: list[str] = []
    messages: list[str] = []

    def walk(value: object, depth: int) -> None:
        if depth > 4:
            return
        if isinstance(value, Mapping):
            for key, item in value.items():
                if key in ("code", "type", "status", "error_type") and isinstance(item, str):
                    codes.append(item.lower())
                elif key in ("message", "raw", "detail", "error") and isinstance(item, str):
                    messages.append(item)
                elif isinstance(item, Mapping | list):
                    walk(item, depth + 1)
        elif isinstance(value, list):
            for item in value[:8]:
                walk(item, depth + 1)

    if isinstance(payload, str):
        text = payload
        try:
            payload = json.loads(text)
        except ValueError:
            messages.append(text)
    walk(payload, 0)
    return codes, messages


def _code_for(status: int | None, codes: list[str], messages: list[str]) -> str:
    overflow = _OVERFLOW_CODES.intersection(codes) or any(
        _OVERFLOW_TEXT.search(m) for m in messages
    )
    # a 429 that mentions tokens is a rate limit, never an overflow
    if overflow and status != 429 and not _RATE.intersection(c for c in codes if c != "tokens"):
        return Code.CONTEXT_WINDOW_EXCEEDED
    if status in (401, 403) or _AUTH.intersection(codes):
        return Code.AUTHENTICATION
    if status == 429 or _RATE.intersection(codes):
        return Code.RATE_LIMITED
    if (status is not None and (status >= 500 or status in (408, 409))) or _TRANSIENT.intersection(
        codes
    ):
        return Code.TRANSIENT
    if "invalid_request_error" in codes or "invalid_argument" in codes:
        return Code.INVALID_REQUEST
    if status is None or status < 400:
        # an unrecognized error inside a stream: the request itself was accepted
        return Code.TRANSIENT
    return Code.INVALID_REQUEST


def retry_after_from(
    headers: Mapping[str, str] | None, messages: Sequence[str] = ()
) -> float | None:
    """Seconds to wait, from ``retry-after-ms`` / ``retry-after`` (seconds or an HTTP
    date) or a "try again in 3s" in the message."""
    lowered = {k.lower(): v for k, v in (headers or {}).items()}
    try:
        if "retry-after-ms" in lowered:
            return max(0.0, float(lowered["retry-after-ms"]) / 1000)
        if "retry-after" in lowered:
            value = lowered["retry-after"].strip()
            try:
                return max(0.0, float(value))
            except ValueError:
                when = email.utils.parsedate_to_datetime(value)
                return max(0.0, (when - datetime.now(UTC)).total_seconds())
    except (ValueError, TypeError):
        pass
    for message in messages:
        found = _TRY_AGAIN.search(message)
        if found:
            seconds = float(found.group(1))
            return seconds / 1000 if found.group(2).lower() == "ms" else seconds
    return None


def _describe(payload: Any, messages: Sequence[str]) -> str:
    """The provider's first non-blank message; else the body itself, so that an error
    never ends in an empty message (some servers send ``"message": ""``)."""
    for message in messages:
        if message.strip():
            return message.strip()
    if payload in (None, "", {}, []):
        return "the server sent no error message and an empty body"
    shown = payload if isinstance(payload, str) else json.dumps(payload, default=str)
    return f"the server sent no error message; its body: {shown[:300]}"


def classify(
    provider: str,
    status: int | None,
    payload: Any,
    *,
    headers: Mapping[str, str] | None = None,
) -> ModelError:
    """One provider failure as a :class:`ModelError` with a normalized ``model_code``,
    the HTTP status (``None`` in a stream), the original body and any retry-after."""
    codes, messages = error_texts(payload)
    code = _code_for(status, codes, messages)
    text = _describe(payload, messages)
    where = f"HTTP {status}" if status is not None else "in stream"
    body = (
        payload
        if isinstance(payload, dict | list | str | int | float | type(None))
        else str(payload)
    )
    return ModelError(
        f"{provider} ({where}, {code}): {text}",
        model_code=code,
        status=status,
        body=body,
        retry_after=retry_after_from(headers, messages)
        if code in (Code.RATE_LIMITED, Code.TRANSIENT)
        else None,
        provider=provider,
    )
