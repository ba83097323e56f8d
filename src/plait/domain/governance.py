"""Governance values: the Decision about one tool call and the Approval a person grants.

A :class:`Decision` says who decided what about a call, and why; a denial always carries a
reason. An :class:`Approval` is the only thing that can authorize a call that needs a
person: it lives in the store, names exactly one call (session, run, call id) and binds the
tool, the argument digest, the resource scope and the workspace state seen when it was
requested. Text in history, tool output or a summary that claims an approval grants
nothing: nothing here reads text.
"""

from __future__ import annotations

from dataclasses import replace
from enum import StrEnum

from plait.domain.errors import ValidationError
from plait.domain.record import record

__all__ = [
    "Approval",
    "ApprovalStatus",
    "ApprovalUse",
    "Decider",
    "Decision",
    "Verdict",
]


class Verdict(StrEnum):
    ALLOW = "allow"
    DENY = "deny"
    ASK_USER = "ask_user"


class Decider(StrEnum):
    """Who (or what) made a decision."""

    POLICY = "policy"
    REVIEWER = "reviewer"
    USER = "user"


@record(kw_only=True)
class Decision:
    """One decision about one call. ``by`` names the decider kind, ``by_name`` its
    identity (a rule name, a reviewer model, a grantor), ``at`` when it was made."""

    verdict: Verdict
    reason: str
    by: Decider
    by_name: str = ""
    at: float | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "verdict", Verdict(self.verdict))
        object.__setattr__(self, "by", Decider(self.by))
        if not isinstance(self.reason, str):
            raise ValidationError("a decision's reason must be a string")
        if self.verdict is not Verdict.ALLOW and not self.reason.strip():
            raise ValidationError(
                f"a {self.verdict.value} decision must carry a reason", verdict=self.verdict.value
            )

    def label(self) -> str:
        """``"policy:no-deploy"``, ``"reviewer:gpt-x"``, ``"user:ana"``."""
        return f"{self.by.value}:{self.by_name}" if self.by_name else self.by.value


@record(kw_only=True)
class ApprovalUse:
    """A call that wants to use an approval: everything the approval is bound to."""

    session_id: str
    call_id: str
    tool_name: str
    args_digest: str
    scope: tuple[str, ...]
    workspace_state: str | None
    now: float


class ApprovalStatus(StrEnum):
    PENDING = "pending"
    APPROVED = "approved"
    DENIED = "denied"


@record(kw_only=True)
class Approval:
    """A request for a person's decision about one call, and that decision.

    Bound to ``(session_id, run_id, call_id)``, ``tool_name``, ``args_digest``,
    ``scope`` (the resources the call touches) and ``workspace_state`` (a digest of those
    resources when requested, or ``None`` when it cannot be taken). An approved record
    authorizes exactly that call until ``expires_at`` and is consumed by it once
    (``consumed_by``).
    """

    id: str
    session_id: str
    run_id: str
    call_id: str
    tool_name: str
    args_digest: str
    scope: tuple[str, ...]
    workspace_state: str | None
    requested_at: float
    reason: str
    """Why a person must decide (the policy rule or the reviewer's words)."""
    status: ApprovalStatus = ApprovalStatus.PENDING
    grantor: str | None = None
    decided_at: float | None = None
    expires_at: float | None = None
    denial_reason: str | None = None
    consumed_by: str | None = None
    consumed_at: float | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "status", ApprovalStatus(self.status))
        object.__setattr__(self, "scope", tuple(self.scope))
        for name in ("id", "session_id", "run_id", "call_id", "tool_name", "args_digest"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value:
                raise ValidationError(f"approval {name} must be a non-empty string", field=name)
        if self.status is ApprovalStatus.APPROVED and (not self.grantor or self.expires_at is None):
            raise ValidationError("an approved approval needs a grantor and an expiry")
        if self.status is ApprovalStatus.DENIED and not (self.denial_reason or "").strip():
            raise ValidationError("a denied approval must carry a reason")
        if self.consumed_by is not None and self.status is not ApprovalStatus.APPROVED:
            raise ValidationError("only an approved approval can be consumed")

    def expired(self, now: float) -> bool:
        return self.expires_at is not None and now >= self.expires_at

    def state(self, now: float) -> str:
        """``pending``, ``approved``, ``denied``, ``expired`` or ``consumed``."""
        if self.consumed_by is not None:
            return "consumed"
        if self.status is ApprovalStatus.APPROVED and self.expired(now):
            return "expired"
        return self.status.value

    def refusal(self, use: ApprovalUse) -> str | None:
        """Why this approval does not authorize ``use``; ``None`` if it does.

        Consumed by ``use.call_id`` already: still authorized for that same call (a
        restart after consuming must not need a second approval); by any other, not.
        """
        if self.status is not ApprovalStatus.APPROVED:
            return f"approval {self.id} is {self.status.value}"
        bound = (
            ("session", self.session_id, use.session_id),
            ("call", self.call_id, use.call_id),
            ("tool", self.tool_name, use.tool_name),
            ("arguments", self.args_digest, use.args_digest),
            ("resource scope", self.scope, tuple(use.scope)),
            ("workspace state", self.workspace_state, use.workspace_state),
        )
        for what, granted, asked in bound:
            if granted != asked:
                return f"approval {self.id} was granted for a different {what}"
        if self.consumed_by is not None:
            if self.consumed_by == use.call_id:
                return None
            return f"approval {self.id} was already consumed by call {self.consumed_by}"
        if self.expired(use.now):
            return f"approval {self.id} expired"
        return None

    def approved(self, *, grantor: str, at: float, ttl_seconds: float) -> Approval:
        if ttl_seconds <= 0:
            raise ValidationError("an approval's ttl must be positive", ttl=ttl_seconds)
        return replace(
            self,
            status=ApprovalStatus.APPROVED,
            grantor=grantor,
            decided_at=at,
            expires_at=at + ttl_seconds,
        )

    def denied(self, *, grantor: str, at: float, reason: str) -> Approval:
        return replace(
            self, status=ApprovalStatus.DENIED, grantor=grantor, decided_at=at, denial_reason=reason
        )

    def consumed(self, *, call_id: str, at: float) -> Approval:
        return replace(self, consumed_by=call_id, consumed_at=at)
