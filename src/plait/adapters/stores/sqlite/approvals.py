"""Approvals in the SQLite store: one table, created on first write (older store files
simply have none yet, which reads treat as empty). Every function runs inside the store's
own transaction (writes) or read, on its connection."""

from __future__ import annotations

import json
import sqlite3

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
from plait.domain.governance import Approval, ApprovalUse

__all__ = ["consume", "decide", "get", "listing", "pending", "request"]

APPROVALS_PENDING_SQLITE = (
    "CREATE INDEX IF NOT EXISTS approvals_pending ON approvals (requested_at) "
    "WHERE status = 'pending'"
)
"""SQLite appends the rowid to every index entry: (requested_at, rowid) in order."""

_DDL = (
    """CREATE TABLE IF NOT EXISTS approvals (
        id TEXT PRIMARY KEY, session_id TEXT NOT NULL, run_id TEXT NOT NULL,
        call_id TEXT NOT NULL, status TEXT NOT NULL, requested_at REAL NOT NULL,
        data TEXT NOT NULL)""",
    "CREATE INDEX IF NOT EXISTS approvals_by_call ON approvals (session_id, run_id, call_id)",
    # a file from before the pending inbox gains it with its next request
    APPROVALS_PENDING_SQLITE,
)
_COLS = "id, session_id, run_id, call_id, status, requested_at, data"


def _exists(conn: sqlite3.Connection) -> bool:
    row = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'approvals'"
    ).fetchone()
    return row is not None


def _ensure(conn: sqlite3.Connection) -> None:
    for statement in _DDL:
        conn.execute(statement)


def _decode(data: str) -> Approval:
    return approval_from_dict(json.loads(data))


def _put(conn: sqlite3.Connection, approval: Approval, *, insert: bool) -> None:
    row = (
        approval.id,
        approval.session_id,
        approval.run_id,
        approval.call_id,
        approval.status.value,
        approval.requested_at,
    )
    data = json.dumps(approval_to_dict(approval), ensure_ascii=False, separators=(",", ":"))
    if insert:
        try:
            conn.execute(
                f"INSERT INTO approvals ({_COLS}) VALUES (?, ?, ?, ?, ?, ?, ?)", (*row, data)
            )
        except sqlite3.IntegrityError:
            raise duplicate_approval(approval.id) from None
    else:
        conn.execute(
            "UPDATE approvals SET status = ?, data = ? WHERE id = ?",
            (approval.status.value, data, approval.id),
        )


def _load(conn: sqlite3.Connection, approval_id: str) -> Approval:
    row = None
    if _exists(conn):
        row = conn.execute("SELECT data FROM approvals WHERE id = ?", (approval_id,)).fetchone()
    if row is None:
        raise not_found(approval_id)
    return _decode(row[0])


def request(conn: sqlite3.Connection, approval: Approval) -> Approval:
    _ensure(conn)
    row = conn.execute(
        "SELECT data FROM approvals WHERE session_id = ? AND run_id = ? AND call_id = ? "
        "AND status = 'pending' ORDER BY rowid DESC LIMIT 1",
        (approval.session_id, approval.run_id, approval.call_id),
    ).fetchone()
    pending = None if row is None else _decode(row[0])
    new = plan_request(pending, approval)
    if new is None:
        assert pending is not None
        return pending
    _put(conn, new, insert=True)
    return new


def get(conn: sqlite3.Connection, approval_id: str) -> Approval:
    return _load(conn, approval_id)


def listing(conn: sqlite3.Connection, session_id: str | None, run_id: str | None) -> list[Approval]:
    if not _exists(conn):
        return []
    rows = conn.execute(
        "SELECT data FROM approvals WHERE (?1 IS NULL OR session_id = ?1) "
        "AND (?2 IS NULL OR run_id = ?2) ORDER BY requested_at DESC, rowid DESC",
        (session_id, run_id),
    ).fetchall()
    return [_decode(r[0]) for r in rows]


def pending(
    conn: sqlite3.Connection, *, owner: str | None, before: str | None, limit: int
) -> list[Approval]:
    """A page of pending requests across sessions (see ``_inbox_pages``)."""
    if before is not None:
        _load(conn, before)  # an unknown cursor is not_found, not an empty page
    if not _exists(conn):
        return []
    sql, args = pending_approvals_sql("rowid", "?", owner=owner, before=before, limit=limit)
    return [_decode(r[0]) for r in conn.execute(sql, args).fetchall()]


def decide(
    conn: sqlite3.Connection,
    approval_id: str,
    *,
    approve: bool,
    grantor: str,
    at: float,
    ttl_seconds: float | None,
    reason: str | None,
) -> Approval:
    current = _load(conn, approval_id)
    new = plan_decision(
        current, approve=approve, grantor=grantor, at=at, ttl_seconds=ttl_seconds, reason=reason
    )
    _put(conn, new, insert=False)
    return new


def consume(conn: sqlite3.Connection, approval_id: str, use: ApprovalUse) -> Approval:
    current = _load(conn, approval_id)
    new = plan_consume(current, use)
    if new is None:
        return current
    _put(conn, new, insert=False)
    return new
