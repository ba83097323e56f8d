"""Messages: the immutable facts of a session's history.

A closed union discriminated by ``kind``: :class:`UserMessage`, :class:`AssistantMessage`
(text and/or tool calls) and :class:`ToolResultMessage` (exactly one per settled call,
paired by ``call_id``). Messages are immutable once built; a fork shares them by id.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import field
from enum import StrEnum
from typing import Any, Literal

from plait.domain.errors import ValidationError
from plait.domain.jsontext import flat_encoder
from plait.domain.record import record

__all__ = [
    "ArtifactRef",
    "AssistantMessage",
    "Message",
    "MessageKind",
    "ToolCall",
    "ToolResult",
    "ToolResultMessage",
    "ToolStatus",
    "Usage",
    "UserMessage",
    "VendorState",
    "argument_digest",
]

MessageKind = Literal["user", "assistant", "tool_result"]


class ToolStatus(StrEnum):
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    DENIED = "denied"
    """Certainly not executed: review or policy refused it."""
    UNKNOWN = "unknown"
    """The external effect is not known: it may or may not have happened."""
    CANCELLED = "cancelled"


def _require_id(value: object, field: str) -> None:
    if not isinstance(value, str) or not value:
        raise ValidationError(f"{field} must be a non-empty string, got {value!r}", field=field)


def argument_digest(arguments_json: str) -> str:
    """sha256 of the canonical JSON of a call's arguments (key order does not matter)."""
    return _digest(json.loads(arguments_json))


_canonical = flat_encoder(sort_keys=True)
"""``json.dumps`` with these settings, without building an encoder per call (arguments
are decoded JSON, or were checked by ``json.dumps`` or a walk of the value: no cycle)."""


def _digest(arguments: Any) -> str:
    canonical = _canonical(arguments)
    return "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()


@record(kw_only=True)
class ToolCall:
    """A tool the model asked for. ``arguments_json`` is the JSON text of an object.

    The text is what is stored and digested. It is decoded once per call value: the
    validated call carries the object its validation decoded (:meth:`checked`), a call
    read back from a store decodes its text on the first :meth:`arguments`.
    """

    id: str
    name: str
    arguments_json: str
    _decoded: dict[str, Any] | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        _require_id(self.id, "tool call id")
        _require_id(self.name, "tool name")
        if not isinstance(self.arguments_json, str) or not self.arguments_json.startswith("{"):
            raise ValidationError(
                f"arguments of tool call {self.id!r} must be a JSON object",
                call_id=self.id,
            )

    @classmethod
    def create(cls, *, id: str, name: str, arguments: dict[str, Any]) -> ToolCall:
        return cls(
            id=id,
            name=name,
            arguments_json=json.dumps(arguments, ensure_ascii=False, separators=(",", ":")),
        )

    @classmethod
    def checked(
        cls, *, id: str, name: str, arguments_json: str, arguments: dict[str, Any]
    ) -> ToolCall:
        """A call whose ``arguments_json`` the caller already decoded into ``arguments``
        (which it hands over: it must not change it afterwards)."""
        call = cls(id=id, name=name, arguments_json=arguments_json)
        object.__setattr__(call, "_decoded", arguments)
        return call

    def arguments(self) -> dict[str, Any]:
        """The decoded arguments, shared by every reader of this call: read, never
        modify (copy first)."""
        decoded = self._decoded
        if decoded is None:
            decoded = json.loads(self.arguments_json)
            assert isinstance(decoded, dict)
            object.__setattr__(self, "_decoded", decoded)
        return decoded

    def argument_digest(self) -> str:
        """:func:`argument_digest` of this call's arguments."""
        return _digest(self.arguments())


@record(kw_only=True)
class Usage:
    """Token usage reported for one model call (zeros where the provider said nothing)."""

    input_tokens: int = 0
    output_tokens: int = 0
    cached_input_tokens: int = 0
    """Part of ``input_tokens`` served from the provider's prompt cache."""
    reasoning_tokens: int = 0
    """Part of ``output_tokens`` spent on reasoning, where the provider reports it."""

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens


@record(kw_only=True)
class VendorState:
    """Opaque continuation state an adapter needs back on the next call (reasoning
    signatures, encrypted reasoning, response ids). The core stores it and returns it only
    to the same vendor; it never reads ``data``."""

    vendor: str
    version: str
    data: dict[str, Any]


@record(kw_only=True)
class ArtifactRef:
    """Where the whole of a large tool output is kept."""

    id: str
    sha256: str
    size: int
    media_type: str = "text/plain"


@record(kw_only=True)
class UserMessage:
    id: str
    text: str
    created_at: float
    run_id: str | None = None
    kind: Literal["user"] = "user"

    def __post_init__(self) -> None:
        _require_id(self.id, "message id")
        if not isinstance(self.text, str):
            raise ValidationError("user message text must be a string", message_id=self.id)


@record(kw_only=True)
class AssistantMessage:
    id: str
    text: str
    created_at: float
    tool_calls: tuple[ToolCall, ...] = ()
    run_id: str | None = None
    step: int = 0
    model: str | None = None
    usage: Usage | None = None
    vendor_state: VendorState | None = None
    output: Any = None
    """A final answer of a run with an output schema: the validated JSON value (None
    otherwise)."""
    kind: Literal["assistant"] = "assistant"

    def __post_init__(self) -> None:
        _require_id(self.id, "message id")
        if len(self.tool_calls) > 1:
            ids = [c.id for c in self.tool_calls]
            if len(set(ids)) != len(ids):
                raise ValidationError(
                    f"assistant message {self.id!r} repeats a tool call id", message_id=self.id
                )


@record(kw_only=True)
class ToolResult:
    """The outcome of one call. ``content`` is what the model sees (possibly a truncated
    view); ``artifact`` points at the whole output when it was too large."""

    call_id: str
    status: ToolStatus
    content: str = ""
    reason: str | None = None
    artifact: ArtifactRef | None = None

    def __post_init__(self) -> None:
        _require_id(self.call_id, "tool result call id")
        if self.status is ToolStatus.DENIED and not self.reason:
            raise ValidationError("a denied tool result must carry a reason", call_id=self.call_id)


@record(kw_only=True)
class ToolResultMessage:
    id: str
    tool_name: str
    result: ToolResult
    created_at: float
    run_id: str | None = None
    step: int = 0
    kind: Literal["tool_result"] = "tool_result"

    def __post_init__(self) -> None:
        _require_id(self.id, "message id")

    @property
    def call_id(self) -> str:
        return self.result.call_id


Message = UserMessage | AssistantMessage | ToolResultMessage
