"""Webhooks on PostgreSQL: the tables, the triggers that write each event (and its
deliveries) in the transaction of the state change it announces, and the queries.

Migration 13 (:data:`MIGRATION`). Like the SQLite store (:mod:`..sqlite.webhooks`), an
event is written by a trigger, so no code path can change the state without it:
``run.finished`` (a run reaching a terminal status), ``outcome.unknown`` (a run entering
``awaiting_resolution``), ``approval.needed`` (a pending approval inserted),
``compaction.failed`` (a ``compaction`` run event with phase ``failed``). An event is
written only when some endpoint subscribes to its type. Deliveries are claimed with
``FOR UPDATE SKIP LOCKED``: two workers never send the same one at once.
"""

from __future__ import annotations

from typing import Any

import psycopg

from plait.adapters.stores.shared.webhook_rows import (
    DUE,
    ENDPOINT_COLS,
    JOB,
    REMOVE,
    RESUME_DELIVERIES,
    RESUME_ENDPOINT,
    UPSERT,
    deliveries_query,
    delivery_from_row,
    endpoint_from_row,
    endpoint_row,
    finish_statements,
    job_from_row,
    not_found,
)
from plait.domain.webhooks import Delivery, DeliveryAttempt, DeliveryJob, DeliveryStatus, Endpoint

__all__ = [
    "MIGRATION",
    "add",
    "claim",
    "deliveries",
    "finish",
    "get",
    "listing",
    "remove",
    "resume",
]

Conn = psycopg.AsyncConnection[Any]


# Migrations are frozen once released: the terminal statuses spelled out.
TERMINAL = "'completed', 'budget_exhausted', 'failed', 'cancelled'"


def _pg(sql: str) -> str:
    return sql.replace("?", "%s")


_RUN_DATA = (
    "jsonb_build_object('run_id', NEW.id, 'session_id', NEW.session_id, 'status', NEW.status)"
)

MIGRATION: tuple[str, ...] = (
    """CREATE TABLE webhook_endpoints (
        id TEXT PRIMARY KEY, url TEXT NOT NULL, events TEXT NOT NULL, secret TEXT NOT NULL,
        principal TEXT, status TEXT NOT NULL, failures INTEGER NOT NULL,
        paused_reason TEXT, created_at DOUBLE PRECISION NOT NULL)""",
    """CREATE TABLE webhook_events (
        id TEXT PRIMARY KEY, type TEXT NOT NULL, at DOUBLE PRECISION NOT NULL,
        session_id TEXT, run_id TEXT, owner TEXT, data TEXT NOT NULL)""",
    """CREATE TABLE webhook_deliveries (
        endpoint_id TEXT NOT NULL, event_id TEXT NOT NULL, status TEXT NOT NULL,
        attempts INTEGER NOT NULL, next_attempt_at DOUBLE PRECISION NOT NULL,
        lease_owner TEXT, lease_expires_at DOUBLE PRECISION, last_error TEXT,
        last_status_code INTEGER, delivered_at DOUBLE PRECISION,
        created_at DOUBLE PRECISION NOT NULL, PRIMARY KEY (endpoint_id, event_id))""",
    """CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_attempt_at)
        WHERE status = 'pending'""",
    """CREATE FUNCTION plait_webhook_event(
        p_id TEXT, p_type TEXT, p_session TEXT, p_run TEXT, p_data JSONB) RETURNS void
    LANGUAGE plpgsql AS $$
    DECLARE
        v_owner TEXT;
        v_at DOUBLE PRECISION := extract(epoch FROM clock_timestamp());
    BEGIN
        IF NOT EXISTS (SELECT 1 FROM webhook_endpoints
                       WHERE position(',' || p_type || ',' IN events) > 0) THEN
            RETURN;
        END IF;
        SELECT owner INTO v_owner FROM sessions WHERE id = p_session;
        INSERT INTO webhook_events (id, type, at, session_id, run_id, owner, data)
        VALUES (p_id, p_type, v_at, p_session, p_run, v_owner, p_data::text)
        ON CONFLICT (id) DO NOTHING;
        IF FOUND THEN
            INSERT INTO webhook_deliveries
                (endpoint_id, event_id, status, attempts, next_attempt_at, created_at)
            SELECT e.id, p_id, 'pending', 0, 0, v_at FROM webhook_endpoints e
            WHERE position(',' || p_type || ',' IN e.events) > 0
              AND (e.principal IS NULL OR e.principal = v_owner)
            ON CONFLICT DO NOTHING;
        END IF;
    END $$""",
    f"""CREATE FUNCTION plait_webhook_runs() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        IF NEW.status IN ({TERMINAL}) THEN
            IF TG_OP = 'INSERT' THEN
                PERFORM plait_webhook_event('evt_' || NEW.id || '_finished', 'run.finished',
                                            NEW.session_id, NEW.id, {_RUN_DATA});
            ELSIF OLD.status NOT IN ({TERMINAL}) THEN
                PERFORM plait_webhook_event('evt_' || NEW.id || '_finished', 'run.finished',
                                            NEW.session_id, NEW.id, {_RUN_DATA});
            END IF;
        ELSIF NEW.status = 'awaiting_resolution' AND TG_OP = 'UPDATE' THEN
            IF OLD.status <> 'awaiting_resolution' THEN
                PERFORM plait_webhook_event(
                    'evt_' || md5(random()::text || clock_timestamp()::text || NEW.id),
                    'outcome.unknown', NEW.session_id, NEW.id, {_RUN_DATA});
            END IF;
        END IF;
        RETURN NULL;
    END $$""",
    """CREATE TRIGGER webhook_runs AFTER INSERT OR UPDATE OF status ON runs
        FOR EACH ROW EXECUTE FUNCTION plait_webhook_runs()""",
    """CREATE FUNCTION plait_webhook_approvals() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        PERFORM plait_webhook_event('evt_' || NEW.id, 'approval.needed', NEW.session_id,
            NEW.run_id, jsonb_build_object('approval_id', NEW.id, 'session_id',
            NEW.session_id, 'run_id', NEW.run_id, 'call_id', NEW.call_id,
            'tool_name', NEW.data::jsonb ->> 'tool_name', 'reason', NEW.data::jsonb ->> 'reason'));
        RETURN NULL;
    END $$""",
    """CREATE TRIGGER webhook_approvals AFTER INSERT ON approvals
        FOR EACH ROW WHEN (NEW.status = 'pending') EXECUTE FUNCTION plait_webhook_approvals()""",
    """CREATE FUNCTION plait_webhook_run_events() RETURNS trigger LANGUAGE plpgsql AS $$
    DECLARE
        v_session TEXT;
    BEGIN
        IF (NEW.data::jsonb ->> 'phase') = 'failed' THEN
            SELECT session_id INTO v_session FROM runs WHERE id = NEW.run_id;
            PERFORM plait_webhook_event('evt_' || NEW.run_id || '_' || NEW.seq,
                'compaction.failed', v_session, NEW.run_id, jsonb_build_object(
                'run_id', NEW.run_id, 'session_id', v_session,
                'trigger', NEW.data::jsonb ->> 'trigger', 'reason', NEW.data::jsonb ->> 'reason'));
        END IF;
        RETURN NULL;
    END $$""",
    """CREATE TRIGGER webhook_run_events AFTER INSERT ON run_events
        FOR EACH ROW WHEN (NEW.type = 'compaction')
        EXECUTE FUNCTION plait_webhook_run_events()""",
)


async def add(conn: Conn, endpoint: Endpoint) -> None:
    await conn.execute(
        f"INSERT INTO webhook_endpoints ({ENDPOINT_COLS}) VALUES "
        "(%s, %s, %s, %s, %s, %s, %s, %s, %s)",
        endpoint_row(endpoint),
    )


async def put(conn: Conn, endpoint: Endpoint) -> None:
    await conn.execute(_pg(UPSERT), endpoint_row(endpoint))


async def listing(conn: Conn, principal: str | None) -> list[Endpoint]:
    sql = f"SELECT {ENDPOINT_COLS} FROM webhook_endpoints"
    args: tuple[Any, ...] = ()
    if principal is not None:
        sql, args = sql + " WHERE principal = %s", (principal,)
    rows = await (await conn.execute(sql + " ORDER BY created_at, id", args)).fetchall()
    return [endpoint_from_row(r) for r in rows]


async def get(conn: Conn, endpoint_id: str) -> Endpoint:
    row = await (
        await conn.execute(
            f"SELECT {ENDPOINT_COLS} FROM webhook_endpoints WHERE id = %s", (endpoint_id,)
        )
    ).fetchone()
    if row is None:
        raise not_found(endpoint_id)
    return endpoint_from_row(row)


async def remove(conn: Conn, endpoint_id: str) -> None:
    await get(conn, endpoint_id)
    for statement in REMOVE:
        await conn.execute(_pg(statement), (endpoint_id,))


async def resume(conn: Conn, endpoint_id: str, now: float) -> Endpoint:
    await get(conn, endpoint_id)
    await conn.execute(_pg(RESUME_ENDPOINT), (endpoint_id,))
    await conn.execute(_pg(RESUME_DELIVERIES), (now, endpoint_id))
    return await get(conn, endpoint_id)


async def deliveries(
    conn: Conn,
    endpoint_id: str | None,
    status: DeliveryStatus | None,
    principal: str | None,
    limit: int,
) -> list[Delivery]:
    sql, args = deliveries_query(endpoint_id, status, principal, limit)
    rows = await (await conn.execute(_pg(sql), args)).fetchall()
    return [delivery_from_row(r) for r in rows]


async def claim(
    conn: Conn, owner: str, now: float, expires_at: float, limit: int
) -> list[DeliveryJob]:
    """Inside a transaction."""
    keys = await (
        await conn.execute(
            "UPDATE webhook_deliveries w SET lease_owner = %s, lease_expires_at = %s, "
            f"attempts = w.attempts + 1 FROM ({_pg(DUE)} FOR UPDATE OF d SKIP LOCKED) pick "
            "WHERE w.endpoint_id = pick.endpoint_id AND w.event_id = pick.event_id "
            "RETURNING w.endpoint_id, w.event_id",
            (owner, expires_at, now, now, limit),
        )
    ).fetchall()
    jobs = []
    for key in keys:
        row = await (await conn.execute(_pg(JOB), tuple(key))).fetchone()
        assert row is not None
        jobs.append(job_from_row(tuple(row)))
    return jobs


async def finish(conn: Conn, attempt: DeliveryAttempt) -> None:
    for sql, args in finish_statements(attempt):
        await conn.execute(_pg(sql), args)
