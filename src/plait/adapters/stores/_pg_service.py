"""Service mode on PostgreSQL: the run queue (``FOR UPDATE SKIP LOCKED``: concurrent
workers each take a different run without waiting on each other), run events numbered
under a per-run advisory lock, and API keys."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from plait.adapters.stores._pg_sql import RUN_COLS
from plait.adapters.stores._service_rows import (
    duplicate_key,
    event_from_row,
    event_row,
    key_from_row,
    key_row,
)
from plait.domain.service import ApiKey, NewRunEvent, RunEventRecord

__all__ = ["add_key", "append_events", "claim_queued", "find_key", "read_events"]

Conn = Any

_CLAIM = (
    "UPDATE runs SET lease_owner = %s, lease_expires_at = %s WHERE id = ("
    "SELECT id FROM runs WHERE status = 'queued' "
    "AND (lease_owner IS NULL OR lease_expires_at <= %s) ORDER BY started_at, ord LIMIT 1 "
    f"FOR UPDATE SKIP LOCKED) RETURNING {RUN_COLS}"
)
_EVENTS_LOCK = "SELECT pg_advisory_xact_lock(hashtext('plait.run_events'), hashtext(%s))"
_LAST = "SELECT coalesce(max(seq), 0) FROM run_events WHERE run_id = %s"
_INSERT = "INSERT INTO run_events (run_id, seq, type, at, data) VALUES (%s, %s, %s, %s, %s)"
_READ = (
    "SELECT run_id, seq, type, at, data FROM run_events WHERE run_id = %s AND seq > %s "
    "ORDER BY seq LIMIT %s"
)
_ADD_KEY = (
    "INSERT INTO api_keys (id, principal, role, key_hash, created_at) "
    "VALUES (%s, %s, %s, %s, %s) ON CONFLICT DO NOTHING"
)
_FIND_KEY = "SELECT id, principal, role, key_hash, created_at FROM api_keys WHERE key_hash = %s"


async def claim_queued(conn: Conn, owner: str, now: float, expires_at: float) -> Any:
    """Inside a write transaction."""
    return await (await conn.execute(_CLAIM, (owner, expires_at, now))).fetchone()


async def append_events(
    conn: Conn, run_id: str, events: Sequence[NewRunEvent]
) -> list[RunEventRecord]:
    """Inside a write transaction. Committed without waiting for the WAL flush: events
    report progress whose durable truth is the run's messages and state (a crash may
    lose the last few events, never a message; the stream then ends from the run's
    state)."""
    await conn.execute("SET LOCAL synchronous_commit = off")
    await conn.execute(_EVENTS_LOCK, (run_id,))
    last = (await (await conn.execute(_LAST, (run_id,))).fetchone())[0]
    rows = [event_row(run_id, last + i, e) for i, e in enumerate(events, 1)]
    async with conn.cursor() as cur:
        await cur.executemany(_INSERT, rows)
    return [event_from_row(r) for r in rows]


async def read_events(
    conn: Conn, run_id: str, after: int, limit: int | None
) -> list[RunEventRecord]:
    rows = await (await conn.execute(_READ, (run_id, after, limit))).fetchall()
    return [event_from_row(r) for r in rows]


async def add_key(conn: Conn, key: ApiKey) -> None:
    """Inside a write transaction."""
    cur = await conn.execute(_ADD_KEY, key_row(key))
    if cur.rowcount != 1:
        raise duplicate_key(key.id)


async def find_key(conn: Conn, key_hash: str) -> ApiKey | None:
    row = await (await conn.execute(_FIND_KEY, (key_hash,))).fetchone()
    return None if row is None else key_from_row(row)
