"""Service mode on SQLite: the run queue, run events and API keys.

The tables are created by the first write that needs them, inside that write's
transaction, like the other optional tables; reads of a store without them find nothing.
Claiming runs inside the store's ``BEGIN IMMEDIATE`` write, so two claimers (threads or
processes) never get the same run.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping, Sequence
from typing import Any

from plait.adapters.stores.shared.service_rows import (
    duplicate_key,
    event_from_row,
    event_row,
    key_from_row,
    key_row,
)
from plait.domain.service import ApiKey, NewRunEvent, RunEventRecord

__all__ = ["add_key", "append_batch", "append_events", "claim_queued", "find_key", "read_events"]

_DDL = (
    """CREATE TABLE IF NOT EXISTS run_events (
        run_id TEXT NOT NULL, seq INTEGER NOT NULL, type TEXT NOT NULL, at REAL NOT NULL,
        data TEXT NOT NULL, PRIMARY KEY (run_id, seq)) WITHOUT ROWID""",
    """CREATE TABLE IF NOT EXISTS api_keys (
        id TEXT PRIMARY KEY, principal TEXT NOT NULL, role TEXT NOT NULL,
        key_hash TEXT NOT NULL UNIQUE, created_at REAL NOT NULL)""",
    "CREATE INDEX IF NOT EXISTS runs_queued ON runs (started_at) WHERE status = 'queued'",
)


def _has(conn: sqlite3.Connection, table: str) -> bool:
    row = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (table,)
    ).fetchone()
    return row is not None


def _ensure(conn: sqlite3.Connection) -> None:
    if not _has(conn, "run_events"):
        for statement in _DDL:
            conn.execute(statement)


COUNT_QUEUED = (
    "SELECT count(*) FROM runs WHERE status = 'queued' "
    "AND (lease_owner IS NULL OR lease_expires_at <= ?)"
)
"""The queue's depth: queued runs no worker holds a live lease on (a claimed run stays
``queued`` until its worker starts it); the ``runs_live`` partial index covers it."""


def claim_queued(
    conn: sqlite3.Connection, run_cols: str, owner: str, now: float, expires_at: float
) -> tuple[Any, ...] | None:
    """Inside a write transaction."""
    row = conn.execute(
        "UPDATE runs SET lease_owner = ?, lease_expires_at = ?, lease_token = lease_token + 1 "
        "WHERE id = ("
        "SELECT id FROM runs WHERE status = 'queued' "
        "AND (lease_owner IS NULL OR lease_expires_at <= ?) ORDER BY started_at, rowid LIMIT 1"
        f") RETURNING {run_cols}",
        (owner, expires_at, now),
    ).fetchone()
    return None if row is None else tuple(row)


def append_events(
    conn: sqlite3.Connection, run_id: str, events: Sequence[NewRunEvent]
) -> list[RunEventRecord]:
    """Inside a write transaction."""
    _ensure(conn)
    last = conn.execute(
        "SELECT coalesce(max(seq), 0) FROM run_events WHERE run_id = ?", (run_id,)
    ).fetchone()[0]
    rows = [event_row(run_id, last + i, e) for i, e in enumerate(events, 1)]
    conn.executemany("INSERT INTO run_events VALUES (?, ?, ?, ?, ?)", rows)
    return [event_from_row(r) for r in rows]


def append_batch(
    conn: sqlite3.Connection, batch: Mapping[str, Sequence[NewRunEvent]]
) -> dict[str, list[RunEventRecord]]:
    """Inside a write transaction: one commit for the events of several runs."""
    return {run_id: append_events(conn, run_id, events) for run_id, events in batch.items()}


def read_events(
    conn: sqlite3.Connection, run_id: str, after: int, limit: int | None
) -> list[RunEventRecord]:
    if not _has(conn, "run_events"):
        return []
    rows = conn.execute(
        "SELECT run_id, seq, type, at, data FROM run_events WHERE run_id = ? AND seq > ? "
        "ORDER BY seq LIMIT ?",
        (run_id, after, -1 if limit is None else max(limit, 0)),
    ).fetchall()
    return [event_from_row(r) for r in rows]


def add_key(conn: sqlite3.Connection, key: ApiKey) -> None:
    """Inside a write transaction."""
    _ensure(conn)
    try:
        conn.execute("INSERT INTO api_keys VALUES (?, ?, ?, ?, ?)", key_row(key))
    except sqlite3.IntegrityError:
        raise duplicate_key(key.id) from None


def find_key(conn: sqlite3.Connection, key_hash: str) -> ApiKey | None:
    if not _has(conn, "api_keys"):
        return None
    row = conn.execute(
        "SELECT id, principal, role, key_hash, created_at FROM api_keys WHERE key_hash = ?",
        (key_hash,),
    ).fetchone()
    return None if row is None else key_from_row(row)
