"""Service-mode values: persisted run events and API keys (docs/design.md#surfaces)."""

from __future__ import annotations

from dataclasses import field
from enum import StrEnum
from typing import Any

from plait.domain.errors import ValidationError
from plait.domain.record import record

__all__ = ["ApiKey", "EventType", "NewRunEvent", "Role", "RunEventRecord"]


class EventType(StrEnum):
    """What a run reports while it works. ``message`` carries every saved message;
    ``tool_call_requested`` and ``tool_result`` single out the tool traffic."""

    RUN_STARTED = "run_started"
    STEP_STARTED = "step_started"
    TEXT_DELTA = "text_delta"
    MESSAGE = "message"
    TOOL_CALL_REQUESTED = "tool_call_requested"
    DECISION = "decision"
    TOOL_STARTED = "tool_started"
    TOOL_RESULT = "tool_result"
    RUN_FINISHED = "run_finished"
    COMPACTION = "compaction"
    """An automatic compaction: started, activated, failed (with the reason) or skipped."""


@record(kw_only=True)
class NewRunEvent:
    """An event before the store numbers it."""

    type: EventType
    at: float
    data: dict[str, Any] = field(default_factory=dict)


@record(kw_only=True)
class RunEventRecord:
    """A persisted event: ``seq`` counts from 1 per run, without gaps, so a client that
    saw event ``n`` resumes with everything after ``n``."""

    run_id: str
    seq: int
    type: EventType
    at: float
    data: dict[str, Any]


class Role(StrEnum):
    USER = "user"
    ADMIN = "admin"
    """Sees and acts on every principal's sessions."""


@record(kw_only=True)
class ApiKey:
    """A bearer key of one principal. Only the key's SHA-256 is ever stored."""

    id: str
    principal: str
    role: Role
    key_hash: str
    created_at: float

    def __post_init__(self) -> None:
        if not self.principal or not self.principal.strip():
            raise ValidationError("an API key needs a principal name")
        if len(self.key_hash) != 64:
            raise ValidationError("key_hash must be a SHA-256 hex digest")
