"""Webhooks on SQLite: endpoints, the event outbox and its deliveries.

The events are written by triggers, so each one is in the same transaction as the
state change it announces, whichever code path makes that change: a run reaching a
terminal status (``run.finished``), a pending approval inserted (``approval.needed``),
a run entering ``awaiting_resolution`` (``outcome.unknown``), a persisted ``compaction``
run event with phase ``failed`` (``compaction.failed``). An event inserts one pending
delivery per matching endpoint (same transaction again). The tables and triggers are
created by the first ``webhooks add``; a store without endpoints writes no events.
"""

from __future__ import annotations

import sqlite3
from typing import Any

from plait.adapters.stores.shared.webhook_rows import (
    DUE,
    ENDPOINT_COLS,
    JOB,
    REMOVE,
    RESUME_DELIVERIES,
    RESUME_ENDPOINT,
    TERMINAL,
    UPSERT,
    deliveries_query,
    delivery_from_row,
    endpoint_from_row,
    endpoint_row,
    finish_statements,
    job_from_row,
    not_found,
)
from plait.adapters.stores.sqlite import approvals, service
from plait.domain.webhooks import Delivery, DeliveryAttempt, DeliveryJob, DeliveryStatus, Endpoint

__all__ = [
    "add",
    "claim",
    "deliveries",
    "finish",
    "get",
    "listing",
    "remove",
    "resume",
]

_NOW = "((julianday('now') - 2440587.5) * 86400.0)"
_OWNER = "(SELECT owner FROM sessions WHERE id = {sid})"
_EVENT = (
    "INSERT OR IGNORE INTO webhook_events (id, type, at, session_id, run_id, owner, data) "
    "SELECT {id}, '{type}', " + _NOW + ", {sid}, {rid}, " + _OWNER + ", json_object({data}) "
    "WHERE EXISTS (SELECT 1 FROM webhook_endpoints WHERE instr(events, ',{type},') > 0);"
)


def _event(id_: str, type_: str, sid: str, rid: str, data: str) -> str:
    return _EVENT.format(id=id_, type=type_, sid=sid, rid=rid, data=data)


_RUN_DATA = "'run_id', NEW.id, 'session_id', NEW.session_id, 'status', NEW.status"
_DDL = (
    """CREATE TABLE IF NOT EXISTS webhook_endpoints (
        id TEXT PRIMARY KEY, url TEXT NOT NULL, events TEXT NOT NULL, secret TEXT NOT NULL,
        principal TEXT, status TEXT NOT NULL, failures INTEGER NOT NULL,
        paused_reason TEXT, created_at REAL NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS webhook_events (
        id TEXT PRIMARY KEY, type TEXT NOT NULL, at REAL NOT NULL, session_id TEXT,
        run_id TEXT, owner TEXT, data TEXT NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS webhook_deliveries (
        endpoint_id TEXT NOT NULL, event_id TEXT NOT NULL, status TEXT NOT NULL,
        attempts INTEGER NOT NULL, next_attempt_at REAL NOT NULL, lease_owner TEXT,
        lease_expires_at REAL, last_error TEXT, last_status_code INTEGER,
        delivered_at REAL, created_at REAL NOT NULL, PRIMARY KEY (endpoint_id, event_id))""",
    """CREATE INDEX IF NOT EXISTS webhook_deliveries_due
        ON webhook_deliveries (next_attempt_at) WHERE status = 'pending'""",
    """CREATE TRIGGER IF NOT EXISTS webhook_fanout AFTER INSERT ON webhook_events BEGIN
        INSERT OR IGNORE INTO webhook_deliveries
            (endpoint_id, event_id, status, attempts, next_attempt_at, created_at)
        SELECT e.id, NEW.id, 'pending', 0, 0, NEW.at FROM webhook_endpoints e
        WHERE instr(e.events, ',' || NEW.type || ',') > 0
          AND (e.principal IS NULL OR e.principal = NEW.owner);
    END""",
    f"""CREATE TRIGGER IF NOT EXISTS webhook_run_finished AFTER UPDATE OF status ON runs
    WHEN NEW.status IN ({TERMINAL}) AND OLD.status NOT IN ({TERMINAL}) BEGIN
        {
        _event(
            "'evt_' || NEW.id || '_finished'", "run.finished", "NEW.session_id", "NEW.id", _RUN_DATA
        )
    }
    END""",
    f"""CREATE TRIGGER IF NOT EXISTS webhook_run_inserted_finished AFTER INSERT ON runs
    WHEN NEW.status IN ({TERMINAL}) BEGIN
        {
        _event(
            "'evt_' || NEW.id || '_finished'", "run.finished", "NEW.session_id", "NEW.id", _RUN_DATA
        )
    }
    END""",
    f"""CREATE TRIGGER IF NOT EXISTS webhook_outcome_unknown AFTER UPDATE OF status ON runs
    WHEN NEW.status = 'awaiting_resolution' AND OLD.status <> 'awaiting_resolution' BEGIN
        {
        _event(
            "'evt_' || lower(hex(randomblob(12)))",
            "outcome.unknown",
            "NEW.session_id",
            "NEW.id",
            _RUN_DATA,
        )
    }
    END""",
    f"""CREATE TRIGGER IF NOT EXISTS webhook_approval_needed AFTER INSERT ON approvals
    WHEN NEW.status = 'pending' BEGIN
        {
        _event(
            "'evt_' || NEW.id",
            "approval.needed",
            "NEW.session_id",
            "NEW.run_id",
            "'approval_id', NEW.id, 'session_id', NEW.session_id, 'run_id', NEW.run_id, "
            "'call_id', NEW.call_id, 'tool_name', json_extract(NEW.data, '$.tool_name'), "
            "'reason', json_extract(NEW.data, '$.reason')",
        )
    }
    END""",
    f"""CREATE TRIGGER IF NOT EXISTS webhook_compaction_failed AFTER INSERT ON run_events
    WHEN NEW.type = 'compaction' AND json_extract(NEW.data, '$.phase') = 'failed' BEGIN
        {
        _event(
            "'evt_' || NEW.run_id || '_' || NEW.seq",
            "compaction.failed",
            "(SELECT session_id FROM runs WHERE id = NEW.run_id)",
            "NEW.run_id",
            "'run_id', NEW.run_id, "
            "'session_id', (SELECT session_id FROM runs WHERE id = NEW.run_id), "
            "'trigger', json_extract(NEW.data, '$.trigger'), "
            "'reason', json_extract(NEW.data, '$.reason')",
        )
    }
    END""",
)


def _has(conn: sqlite3.Connection) -> bool:
    row = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'webhook_endpoints'"
    ).fetchone()
    return row is not None


def _ensure(conn: sqlite3.Connection) -> None:
    service._ensure(conn)  # the tables the triggers watch
    approvals._ensure(conn)
    for statement in _DDL:
        conn.execute(statement)


def add(conn: sqlite3.Connection, endpoint: Endpoint) -> None:
    _ensure(conn)
    conn.execute(
        f"INSERT INTO webhook_endpoints ({ENDPOINT_COLS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        endpoint_row(endpoint),
    )


def put(conn: sqlite3.Connection, endpoint: Endpoint) -> None:
    _ensure(conn)
    conn.execute(UPSERT, endpoint_row(endpoint))


def listing(conn: sqlite3.Connection, principal: str | None) -> list[Endpoint]:
    if not _has(conn):
        return []
    sql = f"SELECT {ENDPOINT_COLS} FROM webhook_endpoints"
    args: tuple[Any, ...] = ()
    if principal is not None:
        sql, args = sql + " WHERE principal = ?", (principal,)
    return [endpoint_from_row(r) for r in conn.execute(sql + " ORDER BY created_at, id", args)]


def get(conn: sqlite3.Connection, endpoint_id: str) -> Endpoint:
    row = None
    if _has(conn):
        row = conn.execute(
            f"SELECT {ENDPOINT_COLS} FROM webhook_endpoints WHERE id = ?", (endpoint_id,)
        ).fetchone()
    if row is None:
        raise not_found(endpoint_id)
    return endpoint_from_row(row)


def remove(conn: sqlite3.Connection, endpoint_id: str) -> None:
    get(conn, endpoint_id)
    for statement in REMOVE:
        conn.execute(statement, (endpoint_id,))


def resume(conn: sqlite3.Connection, endpoint_id: str, now: float) -> Endpoint:
    get(conn, endpoint_id)
    conn.execute(RESUME_ENDPOINT, (endpoint_id,))
    conn.execute(RESUME_DELIVERIES, (now, endpoint_id))
    return get(conn, endpoint_id)


def deliveries(
    conn: sqlite3.Connection,
    endpoint_id: str | None,
    status: DeliveryStatus | None,
    principal: str | None,
    limit: int,
) -> list[Delivery]:
    if not _has(conn):
        return []
    sql, args = deliveries_query(endpoint_id, status, principal, limit)
    return [delivery_from_row(r) for r in conn.execute(sql, args)]


def claim(
    conn: sqlite3.Connection, owner: str, now: float, expires_at: float, limit: int
) -> list[DeliveryJob]:
    """Inside a write transaction."""
    if not _has(conn):
        return []
    keys = conn.execute(
        "UPDATE webhook_deliveries SET lease_owner = ?, lease_expires_at = ?, "
        f"attempts = attempts + 1 WHERE (endpoint_id, event_id) IN ({DUE}) "
        "RETURNING endpoint_id, event_id",
        (owner, expires_at, now, now, limit),
    ).fetchall()
    return [job_from_row(tuple(conn.execute(JOB, tuple(key)).fetchone())) for key in keys]


def finish(conn: sqlite3.Connection, attempt: DeliveryAttempt) -> None:
    """Inside a write transaction (see :func:`..shared.webhook_rows.finish_statements`)."""
    for sql, args in finish_statements(attempt):
        conn.execute(sql, args)
