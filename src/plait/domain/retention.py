"""Raw-history retention: the one, explicit exception to "raw history is never modified".

A retention policy may *expire* old messages: the body is replaced by a tombstone of the
same kind that keeps the message's place and structure (id, seq, kind, created time, the
tool call ids and names, a tool result's call id and status) but none of its content, and
an :class:`Expiry` record says when, by which policy, and the digest of what was there.
In ``archive`` mode the originals are first written to an archive artifact (outside any
workspace) named by the record, so they can be verified against the digest and restored.

Only messages that every session holding them has summarized (an active summary covers
their seq) and that are older than the policy's age are eligible, unless forced; a
session with a live run is never touched. Readers report an expired message as
``expired``, never as missing, and never invent what it said.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from collections.abc import Mapping
from dataclasses import replace
from typing import Any, Literal

from plait.domain.errors import ValidationError
from plait.domain.messages import (
    ArtifactRef,
    AssistantMessage,
    Message,
    MessageKind,
    ToolCall,
    ToolResult,
    ToolResultMessage,
    ToolStatus,
    Usage,
    UserMessage,
    VendorState,
)
from plait.domain.record import record

__all__ = [
    "EXPIRED_TEXT",
    "RETENTION_MODES",
    "SECONDS_PER_DAY",
    "Expiry",
    "RetentionMode",
    "RetentionSettings",
    "Tombstone",
    "archive_digest",
    "body_digest",
    "check_days",
    "expiry_from_dict",
    "expiry_to_dict",
    "message_from_archive",
    "message_to_archive",
    "tombstone",
]

RetentionMode = Literal["expire", "archive"]
RETENTION_MODES: tuple[RetentionMode, ...] = ("expire", "archive")

EXPIRED_TEXT = "[expired: removed by the raw-history retention policy; do not assume what it said]"
"""What stands in a tombstone where the content was: any reader that does not look at the
expiry record (a model adapter, an old client) still sees that the content is gone."""

SECONDS_PER_DAY = 86_400


def check_days(days: object, *, what: str = "older-than days") -> float:
    """A positive number of days (fractions allowed), or a clear error."""
    if isinstance(days, bool) or not isinstance(days, int | float) or not math.isfinite(days):
        raise ValidationError(f"{what} must be a number of days, got {days!r}", field=what)
    if days <= 0:
        raise ValidationError(
            f"{what} must be more than 0 days, got {days!r} (a retention policy never "
            "expires what was just written)",
            field=what,
        )
    return float(days)


@record(kw_only=True)
class RetentionSettings:
    """The ``[retention]`` table: ``raw_history_days`` (no policy when absent: nothing is
    ever expired unless a command names an age) and ``mode``."""

    raw_history_days: float | None = None
    mode: RetentionMode = "expire"

    def __post_init__(self) -> None:
        if self.raw_history_days is not None:
            check_days(self.raw_history_days, what="raw_history_days")
        if self.mode not in RETENTION_MODES:
            raise ValidationError(
                f"mode must be 'expire' or 'archive', got {self.mode!r}", key="mode"
            )

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> RetentionSettings:
        """Unknown keys and wrong types are errors naming the key."""
        for key in data:
            if key not in ("raw_history_days", "mode"):
                raise ValidationError(
                    f"unknown key {key!r}; known: mode, raw_history_days", key=key
                )
        days = data.get("raw_history_days")
        mode = data.get("mode", "expire")
        if days is not None and (isinstance(days, bool) or not isinstance(days, int | float)):
            raise ValidationError(
                f"raw_history_days must be a number of days, got {days!r}", key="raw_history_days"
            )
        if not isinstance(mode, str):
            raise ValidationError(f"mode must be a string, got {mode!r}", key="mode")
        return cls(raw_history_days=None if days is None else float(days), mode=mode)  # type: ignore[arg-type]


@record(kw_only=True)
class Expiry:
    """Why a message's content is gone: kept beside its tombstone by every store."""

    message_id: str
    kind: MessageKind
    created_at: float
    digest: str
    """sha256 of the original message (:func:`body_digest`): an archived copy can be
    checked against it."""
    expired_at: float
    policy: str
    """The rule that expired it, e.g. ``raw_history_days=30`` or ``forced: older than 30
    days``."""
    mode: RetentionMode
    archive_id: str | None = None
    """The artifact that holds the original (``archive`` mode)."""


@record(kw_only=True)
class Tombstone:
    """What a store writes for one expired message: the redacted body and its record."""

    message: Message
    expiry: Expiry


def _plain(value: Any) -> Any:
    if isinstance(value, ToolStatus):
        return value.value
    return value


def _public(value: Any) -> Any:
    """``dataclasses.asdict`` without private fields (a call's decoded-arguments cache
    is no part of the message)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {
            f.name: _public(getattr(value, f.name))
            for f in dataclasses.fields(value)
            if not f.name.startswith("_")
        }
    if isinstance(value, list | tuple):
        return [_public(item) for item in value]
    if isinstance(value, dict):
        return {key: _public(item) for key, item in value.items()}
    return value


def message_to_archive(message: Message) -> dict[str, Any]:
    """The whole message as plain JSON data (the archive's and the digest's shape)."""
    data: dict[str, Any] = json.loads(json.dumps(_public(message), default=_plain))
    return data


def message_from_archive(data: dict[str, Any]) -> Message:
    """The message :func:`message_to_archive` wrote. Raises KeyError/TypeError/ValueError
    (or :class:`~plait.domain.errors.ValidationError`) on a bad shape."""
    kind = data["kind"]
    common = {"id": data["id"], "created_at": float(data["created_at"]), "run_id": data["run_id"]}
    if kind == "user":
        return UserMessage(text=data["text"], **common)
    if kind == "assistant":
        usage, vendor = data["usage"], data["vendor_state"]
        return AssistantMessage(
            text=data["text"],
            tool_calls=tuple(ToolCall(**c) for c in data["tool_calls"]),
            step=int(data["step"]),
            model=data["model"],
            usage=None if usage is None else Usage(**usage),
            vendor_state=None if vendor is None else VendorState(**vendor),
            **common,
        )
    if kind == "tool_result":
        result = data["result"]
        artifact = result["artifact"]
        return ToolResultMessage(
            tool_name=data["tool_name"],
            step=int(data["step"]),
            result=ToolResult(
                call_id=result["call_id"],
                status=ToolStatus(result["status"]),
                content=result["content"],
                reason=result["reason"],
                artifact=None if artifact is None else ArtifactRef(**artifact),
            ),
            **common,
        )
    raise ValueError(f"unknown message kind {kind!r}")


def archive_digest(data: dict[str, Any]) -> str:
    """sha256 of an archived message's canonical JSON: checked against the data as it was
    written, so an archive stays verifiable when the message classes gain fields."""
    canonical = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()


def body_digest(message: Message) -> str:
    return archive_digest(message_to_archive(message))


def _redacted(message: Message) -> Message:
    if isinstance(message, UserMessage):
        return replace(message, text=EXPIRED_TEXT)
    if isinstance(message, AssistantMessage):
        calls = tuple(
            ToolCall(id=c.id, name=c.name, arguments_json="{}") for c in message.tool_calls
        )
        return replace(message, text=EXPIRED_TEXT, tool_calls=calls, usage=None, vendor_state=None)
    result = message.result
    return replace(
        message,
        result=ToolResult(
            call_id=result.call_id,
            status=result.status,
            content=EXPIRED_TEXT,
            reason=EXPIRED_TEXT if result.reason is not None else None,
            artifact=result.artifact,
        ),
    )


def tombstone(
    message: Message,
    *,
    expired_at: float,
    policy: str,
    mode: RetentionMode,
    archive_id: str | None = None,
) -> Tombstone:
    """The tombstone of ``message``. Its structure stays (a tool call still pairs with its
    result, so complete units and fork points are unchanged); an artifact reference stays
    too (the artifact may be shared), but readers refuse to serve it for an expired
    message."""
    if mode not in RETENTION_MODES:
        raise ValidationError(f"retention mode must be 'expire' or 'archive', got {mode!r}")
    return Tombstone(
        message=_redacted(message),
        expiry=Expiry(
            message_id=message.id,
            kind=message.kind,
            created_at=message.created_at,
            digest=body_digest(message),
            expired_at=expired_at,
            policy=policy,
            mode=mode,
            archive_id=archive_id,
        ),
    )


EXPIRY_VERSION = 1


def expiry_to_dict(expiry: Expiry) -> dict[str, Any]:
    return {
        "schema_version": EXPIRY_VERSION,
        "message_id": expiry.message_id,
        "kind": expiry.kind,
        "created_at": expiry.created_at,
        "digest": expiry.digest,
        "expired_at": expiry.expired_at,
        "policy": expiry.policy,
        "mode": expiry.mode,
        "archive_id": expiry.archive_id,
    }


def expiry_from_dict(data: dict[str, Any]) -> Expiry:
    """Raises KeyError/ValueError/TypeError on a bad shape (the store names where)."""
    if data.get("schema_version") != EXPIRY_VERSION:
        raise ValueError(f"unknown expiry record schema_version {data.get('schema_version')!r}")
    kind = data["kind"]
    mode = data["mode"]
    if kind not in ("user", "assistant", "tool_result") or mode not in RETENTION_MODES:
        raise ValueError(f"bad expiry record kind {kind!r} / mode {mode!r}")
    return Expiry(
        message_id=str(data["message_id"]),
        kind=kind,
        created_at=float(data["created_at"]),
        digest=str(data["digest"]),
        expired_at=float(data["expired_at"]),
        policy=str(data["policy"]),
        mode=mode,
        archive_id=data["archive_id"],
    )
