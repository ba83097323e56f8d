"""Approval rules and codec shared by every store: what a request, a decision and a
consumption may change, checked against the stored record inside the store's own
transaction or lock."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from plait.domain.errors import (
    ApprovalNotFoundError,
    ApprovalRefusedError,
    ConflictError,
    CorruptStoreError,
    RunStateError,
)
from plait.domain.governance import Approval, ApprovalStatus, ApprovalUse

__all__ = [
    "APPROVAL_SCHEMA_VERSION",
    "approval_from_dict",
    "approval_to_dict",
    "consume_in",
    "decide_in",
    "duplicate_approval",
    "get_in",
    "not_found",
    "plan_consume",
    "plan_decision",
    "plan_request",
    "request_in",
    "select",
]

APPROVAL_SCHEMA_VERSION = 1


def approval_to_dict(approval: Approval) -> dict[str, Any]:
    data = asdict(approval)
    data["status"] = approval.status.value
    data["scope"] = list(approval.scope)
    data["schema_version"] = APPROVAL_SCHEMA_VERSION
    return data


def approval_from_dict(data: dict[str, Any]) -> Approval:
    try:
        if data.get("schema_version") != APPROVAL_SCHEMA_VERSION:
            raise ValueError(f"unknown approval schema_version {data.get('schema_version')!r}")
        fields = {k: v for k, v in data.items() if k != "schema_version"}
        fields["scope"] = tuple(fields["scope"])
        return Approval(**fields)
    except (TypeError, KeyError, ValueError) as error:
        raise CorruptStoreError(f"undecodable approval record: {error}") from error


def not_found(approval_id: str) -> ApprovalNotFoundError:
    return ApprovalNotFoundError(
        f"approval {approval_id!r} not found; `plait approvals list` shows them",
        approval_id=approval_id,
    )


def duplicate_approval(approval_id: str) -> ConflictError:
    return ConflictError(f"approval {approval_id!r} already exists", approval_id=approval_id)


def plan_request(pending_for_call: Approval | None, new: Approval) -> Approval | None:
    """The record to insert, or ``None`` when ``pending_for_call`` (the pending request
    already stored for the same call) answers it."""
    if new.status is not ApprovalStatus.PENDING or new.consumed_by is not None:
        raise ConflictError("a new approval request must be pending", approval_id=new.id)
    if pending_for_call is None:
        return new
    if pending_for_call.args_digest != new.args_digest:
        raise ConflictError(
            f"call {new.call_id} already has a pending approval with other arguments",
            approval_id=pending_for_call.id,
        )
    return None


def plan_decision(
    current: Approval,
    *,
    approve: bool,
    grantor: str,
    at: float,
    ttl_seconds: float | None,
    reason: str | None,
) -> Approval:
    if current.status is not ApprovalStatus.PENDING:
        raise RunStateError(
            f"approval {current.id} is already {current.status.value}; only a pending "
            "request can be decided",
            approval_id=current.id,
            status=current.status.value,
        )
    if approve:
        if ttl_seconds is None:
            raise RunStateError("approving needs a ttl", approval_id=current.id)
        return current.approved(grantor=grantor, at=at, ttl_seconds=ttl_seconds)
    if not (reason or "").strip():
        raise RunStateError("denying needs a reason", approval_id=current.id)
    assert reason is not None
    return current.denied(grantor=grantor, at=at, reason=reason)


def plan_consume(current: Approval, use: ApprovalUse) -> Approval | None:
    """The consumed record to write, ``None`` if ``use.call_id`` consumed it already;
    :class:`ApprovalRefusedError` if it does not authorize ``use``."""
    why = current.refusal(use)
    if why is not None:
        raise ApprovalRefusedError(why, approval_id=current.id, call_id=use.call_id)
    if current.consumed_by is not None:
        return None
    return current.consumed(call_id=use.call_id, at=use.now)


# --- the same rules over a mapping of every record (memory and JSONL stores) --------------
# Each returns the record to hand back and whether the store must write it.


def get_in(records: dict[str, Approval], approval_id: str) -> Approval:
    found = records.get(approval_id)
    if found is None:
        raise not_found(approval_id)
    return found


def request_in(records: dict[str, Approval], approval: Approval) -> tuple[Approval, bool]:
    key = (approval.session_id, approval.run_id, approval.call_id)
    pending = next(
        (
            a
            for a in reversed(records.values())
            if (a.session_id, a.run_id, a.call_id) == key and a.status is ApprovalStatus.PENDING
        ),
        None,
    )
    new = plan_request(pending, approval)
    if new is None:
        assert pending is not None
        return pending, False
    if new.id in records:
        raise duplicate_approval(new.id)
    return new, True


def decide_in(
    records: dict[str, Approval],
    approval_id: str,
    *,
    approve: bool,
    grantor: str,
    at: float,
    ttl_seconds: float | None,
    reason: str | None,
) -> tuple[Approval, bool]:
    new = plan_decision(
        get_in(records, approval_id),
        approve=approve,
        grantor=grantor,
        at=at,
        ttl_seconds=ttl_seconds,
        reason=reason,
    )
    return new, True


def consume_in(
    records: dict[str, Approval], approval_id: str, use: ApprovalUse
) -> tuple[Approval, bool]:
    current = get_in(records, approval_id)
    new = plan_consume(current, use)
    return (current, False) if new is None else (new, True)


def select(
    records: dict[str, Approval], *, session_id: str | None, run_id: str | None
) -> list[Approval]:
    """Newest request first; among equal times, the later-stored first."""
    found = [
        a
        for a in reversed(records.values())
        if (session_id is None or a.session_id == session_id)
        and (run_id is None or a.run_id == run_id)
    ]
    found.sort(key=lambda approval: approval.requested_at, reverse=True)
    return found
