"""Approvals in the PostgreSQL store (rules in :mod:`..shared.approvals`). Requests lock the
session row and decisions lock the approval row, so concurrent writers serialize."""

from __future__ import annotations

import json
from typing import Any

from plait.adapters.stores.postgres.sql import FENCE as _FENCE
from plait.adapters.stores.shared.approvals import (
    approval_from_dict,
    approval_to_dict,
    duplicate_approval,
    not_found,
    plan_consume,
    plan_decision,
    plan_request,
)
from plait.adapters.stores.shared.inbox_pages import pending_approvals_sql
from plait.adapters.stores.shared.state import check_token, session_not_found
from plait.domain.governance import Approval, ApprovalUse
from plait.domain.runs import RunStatus

__all__ = ["consume", "decide", "get", "listing", "pending", "request"]

Conn = Any
_COLS = "id, session_id, run_id, call_id, status, requested_at, data"
_PENDING = (
    "SELECT data FROM approvals WHERE session_id = %s AND run_id = %s AND call_id = %s "
    "AND status = 'pending' ORDER BY ord DESC LIMIT 1"
)
_LIST = (
    "SELECT data FROM approvals WHERE (%(s)s::text IS NULL OR session_id = %(s)s) "
    "AND (%(r)s::text IS NULL OR run_id = %(r)s) ORDER BY requested_at DESC, ord DESC"
)


def _decode(data: str) -> Approval:
    return approval_from_dict(json.loads(data))


def _data(approval: Approval) -> str:
    return json.dumps(approval_to_dict(approval), ensure_ascii=False, separators=(",", ":"))


async def _load(conn: Conn, approval_id: str, *, lock: bool = False) -> Approval:
    sql = "SELECT data FROM approvals WHERE id = %s" + (" FOR UPDATE" if lock else "")
    row = await (await conn.execute(sql, (approval_id,))).fetchone()
    if row is None:
        raise not_found(approval_id)
    return _decode(row[0])


async def _update(conn: Conn, approval: Approval) -> None:
    await conn.execute(
        "UPDATE approvals SET status = %s, data = %s WHERE id = %s",
        (approval.status.value, _data(approval), approval.id),
    )


async def request(conn: Conn, approval: Approval, lease_token: int | None = None) -> Approval:
    """Inside a write transaction. ``lease_token``: fenced by the run's token (its row
    locked against a concurrent claim until the request is written)."""
    lock = "SELECT 1 FROM sessions WHERE id = %s FOR UPDATE"
    if await (await conn.execute(lock, (approval.session_id,))).fetchone() is None:
        raise session_not_found(approval.session_id)
    if lease_token is not None:
        row = await (await conn.execute(_FENCE, (approval.run_id,))).fetchone()
        check_token(
            approval.run_id,
            None if row is None else int(row[0]),
            lease_token,
            ended=row is not None and RunStatus(row[1]).terminal,
            wanted=None,
        )
    params = (approval.session_id, approval.run_id, approval.call_id)
    row = await (await conn.execute(_PENDING, params)).fetchone()
    pending = None if row is None else _decode(row[0])
    new = plan_request(pending, approval)
    if new is None:
        assert pending is not None
        return pending
    cur = await conn.execute(
        f"INSERT INTO approvals ({_COLS}) VALUES (%s, %s, %s, %s, %s, %s, %s) "
        "ON CONFLICT (id) DO NOTHING",
        (
            new.id,
            new.session_id,
            new.run_id,
            new.call_id,
            new.status.value,
            new.requested_at,
            _data(new),
        ),
    )
    if cur.rowcount != 1:
        raise duplicate_approval(new.id)
    return new


async def get(conn: Conn, approval_id: str) -> Approval:
    return await _load(conn, approval_id)


async def pending(
    conn: Conn, *, owner: str | None, before: str | None, limit: int | None
) -> list[Approval]:
    """A page of pending requests across sessions (see ``_inbox_pages``)."""
    if before is not None:
        await _load(conn, before)  # an unknown cursor is not_found, not an empty page
    sql, args = pending_approvals_sql("ord", "%s", owner=owner, before=before, limit=limit)
    return [_decode(r[0]) for r in await (await conn.execute(sql, args)).fetchall()]


async def listing(conn: Conn, session_id: str | None, run_id: str | None) -> list[Approval]:
    rows = await (await conn.execute(_LIST, {"s": session_id, "r": run_id})).fetchall()
    return [_decode(r[0]) for r in rows]


async def decide(
    conn: Conn,
    approval_id: str,
    *,
    approve: bool,
    grantor: str,
    at: float,
    ttl_seconds: float | None,
    reason: str | None,
) -> Approval:
    """Inside a write transaction."""
    current = await _load(conn, approval_id, lock=True)
    new = plan_decision(
        current, approve=approve, grantor=grantor, at=at, ttl_seconds=ttl_seconds, reason=reason
    )
    await _update(conn, new)
    return new


async def consume(conn: Conn, approval_id: str, use: ApprovalUse) -> Approval:
    """Inside a write transaction."""
    current = await _load(conn, approval_id, lock=True)
    new = plan_consume(current, use)
    if new is None:
        return current
    await _update(conn, new)
    return new
