"""Sessions and the execution records kept for each tool call."""

from __future__ import annotations

from enum import StrEnum

from plait.domain._copy import copier
from plait.domain.messages import Message, ToolStatus
from plait.domain.record import record
from plait.domain.tools import EffectClass

__all__ = [
    "ExecutionRecord",
    "ExecutionState",
    "ForkOrigin",
    "Session",
    "StoredMessage",
]


@record(kw_only=True)
class ForkOrigin:
    parent_session_id: str
    fork_point_message_id: str


@record(kw_only=True)
class Session:
    """A conversation. ``version`` is the sequence number of its last message (0 when
    empty); appends name the version they expect, so a second writer conflicts instead of
    interleaving. ``active_run_id`` is set while a run owns the session."""

    id: str
    created_at: float
    owner: str | None = None
    workspace: str | None = None
    version: int = 0
    active_run_id: str | None = None
    fork_origin: ForkOrigin | None = None
    title: str | None = None
    model: str | None = None
    """The model spec the session runs with when a run names none (set by its creation
    or its first run)."""


@record
class StoredMessage:
    """A message at its place in one session (membership is ``(session_id, seq, id)``)."""

    seq: int
    message: Message


class ExecutionState(StrEnum):
    REQUESTED = "requested"
    REVIEWED = "reviewed"
    STARTED = "started"
    SETTLED = "settled"


@record(kw_only=True)
class ExecutionRecord:
    """The life of one tool call, keyed by ``(session_id, run_id, call_id)``.

    ``idempotency_key`` is derived from that key and handed to the tool, so an idempotent
    tool can deduplicate a repeat after a crash. The same key with a different
    ``args_digest`` is rejected by every store.
    """

    session_id: str
    run_id: str
    call_id: str
    tool_name: str
    effect: EffectClass
    args_digest: str
    idempotency_key: str
    state: ExecutionState
    requested_at: float
    reviewed_at: float | None = None
    started_at: float | None = None
    settled_at: float | None = None
    result_status: ToolStatus | None = None
    """``unknown`` while a side effect's outcome awaits a person's resolution."""
    decision: str | None = None
    """What the ToolGate decided before the call could start: ``allow``, ``deny`` or
    ``needs_approval`` (set with ``reviewed_at``)."""
    decided_by: str | None = None
    decision_reason: str | None = None
    note: str | None = None
    """Why the outcome is unknown, or what the person who resolved it verified."""

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.session_id, self.run_id, self.call_id)

    def decided(
        self,
        state: ExecutionState,
        at: float,
        decision: str,
        decided_by: str | None,
        reason: str | None,
    ) -> ExecutionRecord:
        """The record reviewed at ``at`` (and started then, when ``state`` is
        ``started``): ``dataclasses.replace`` with these fields, by the slots (a record
        moves forward at every call of every step)."""
        started = at if state is ExecutionState.STARTED else None
        return _decided(self, state, at, started, decision, decided_by, reason)

    def settled(self, at: float, status: ToolStatus) -> ExecutionRecord:
        """The record settled at ``at`` with a result of ``status``: ``dataclasses.
        replace`` with these fields, by the slots."""
        return _settled(self, ExecutionState.SETTLED, at, status)


_decided = copier(
    ExecutionRecord,
    ("state", "reviewed_at", "started_at", "decision", "decided_by", "decision_reason"),
)
_settled = copier(ExecutionRecord, ("state", "settled_at", "result_status"))
