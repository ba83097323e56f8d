"""Service mode on PostgreSQL: the run queue (``FOR UPDATE SKIP LOCKED``: concurrent
workers each take a different run without waiting on each other), run events (numbered
per run, written for many runs in one statement; listeners are notified in another, see
:mod:`.feed`), and API keys."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from psycopg import errors as pg_errors

from plait.adapters.stores.postgres.arrays import Floats, Ints, Texts
from plait.adapters.stores.postgres.context_cache import Stamp
from plait.adapters.stores.postgres.sql import RUN_COLS
from plait.adapters.stores.shared.rows import decode_messages, run_from_row, session_from_row
from plait.adapters.stores.shared.service_rows import (
    duplicate_key,
    event_from_row,
    event_row,
    key_from_row,
    key_row,
)
from plait.application.claiming import ClaimedRun
from plait.domain.service import ApiKey, NewRunEvent, RunEventRecord

__all__ = [
    "CHANNEL",
    "add_key",
    "append_batch",
    "claim_queued",
    "claim_started",
    "find_key",
    "notify",
    "read_events",
]

Conn = Any

_CLAIM = (
    "UPDATE runs SET lease_owner = %s, lease_expires_at = %s, lease_token = lease_token + 1 "
    "WHERE id = ("
    "SELECT id FROM runs WHERE status = 'queued' "
    "AND (lease_owner IS NULL OR lease_expires_at <= %s) ORDER BY started_at, ord LIMIT 1 "
    f"FOR UPDATE SKIP LOCKED) RETURNING {RUN_COLS}"
)
_CLAIM_STARTED = "SELECT * FROM plait_claim(%s, %s, %s, %s, %s)"
CHANNEL = "plait_run_events"
"""``NOTIFY`` channel: one ``"<run_id> <last seq>"`` payload per run and committing write."""
# One statement, so one implicit transaction: number each run's new events after its last
# one (read per run from the primary key's index: a join would scan every run's events on
# each write; two writers of one run pick the same numbers, the primary key turns that
# into a unique violation and the loser retries), insert them. Listeners are notified
# after the commit, in a statement of its own (see ``notify``).
# Each array is passed through a scalar subquery: ``unnest`` of a bound value lets the
# planner see the arrays' lengths, so a plan made for the values (re-planned at every
# execution, about 0.3 ms of the server's CPU) always looks cheaper than the prepared
# generic one, which is never used; behind a subquery both estimate alike and the
# generic plan (the same index lookups) is kept after the first executions.
_APPEND = """
WITH given AS (
    SELECT * FROM unnest((SELECT %b::text[]), (SELECT %b::text[]), (SELECT %b::float8[]),
                         (SELECT %b::text[]), (SELECT %b::integer[]))
        WITH ORDINALITY AS n(run_id, type, at, data, token, ord)
), new AS (
    SELECT g.* FROM given g WHERE g.token IS NULL
        OR g.token = (SELECT r.lease_token FROM runs r WHERE r.id = g.run_id)
), base AS (
    SELECT r.run_id, coalesce(
        (SELECT max(e.seq) FROM run_events e WHERE e.run_id = r.run_id), 0) AS last
    FROM (SELECT DISTINCT run_id FROM new) r
), ins AS (
    INSERT INTO run_events (run_id, seq, type, at, data)
    SELECT n.run_id, b.last + row_number() OVER (PARTITION BY n.run_id ORDER BY n.ord),
        n.type, n.at, n.data
    FROM new n JOIN base b ON b.run_id = n.run_id
    RETURNING run_id, seq
)
SELECT run_id, max(seq) FROM ins GROUP BY run_id"""
_RETRIES = 5
# Notifications of events already durable: a transaction that writes nothing but the
# notifications need not wait for a WAL flush (``synchronous_commit`` off for it alone:
# notifications are never durable in PostgreSQL anyway), so the database-wide lock that
# orders notifying transactions is not held across a flush.
_NOTIFY = (
    "SELECT set_config('synchronous_commit', 'off', true), "
    f"(SELECT count(pg_notify('{CHANNEL}', p)) FROM unnest(%b::text[]) AS p)"
)
_READ = (
    "SELECT run_id, seq, type, at, data FROM run_events WHERE run_id = %s AND seq > %s "
    "ORDER BY seq LIMIT %s"
)
_ADD_KEY = (
    "INSERT INTO api_keys (id, principal, role, key_hash, created_at) "
    "VALUES (%s, %s, %s, %s, %s) ON CONFLICT DO NOTHING"
)
_FIND_KEY = "SELECT id, principal, role, key_hash, created_at FROM api_keys WHERE key_hash = %s"


async def count_queued(conn: Conn, now: float) -> int:
    """The queue's depth: queued runs no worker holds a live lease on (a run claimed by
    ``claim_queued`` stays ``queued`` until its worker starts it); the ``runs_live``
    partial index covers it."""
    sql = (
        "SELECT count(*) FROM runs WHERE status = 'queued' "
        "AND (lease_owner IS NULL OR lease_expires_at <= %s)"
    )
    row = await (await conn.execute(sql, (now,))).fetchone()
    return 0 if row is None else int(row[0])


async def claim_queued(conn: Conn, owner: str, now: float, expires_at: float) -> Any:
    """One statement: atomic in autocommit or inside a transaction."""
    return await (await conn.execute(_CLAIM, (owner, expires_at, now))).fetchone()


async def claim_started(
    conn: Conn, owner: str, now: float, expires_at: float, model: str, spec: str | None
) -> tuple[ClaimedRun, Stamp] | None:
    """One statement (``plait_claim``, see :mod:`.functions`): in autocommit its own
    durable transaction. With the session's stamp (see :mod:`.context_cache`)."""
    params = (owner, now, expires_at, model, spec)
    rows = await (await conn.execute(_CLAIM_STARTED, params)).fetchall()
    if not rows:
        return None
    first = rows[0]
    stored = [(*r[15:18], r[18].decode(), *r[19:27]) for r in rows if r[15] is not None]
    version = stored[-1][0] if stored else 0
    session = session_from_row((first[1], *first[8:11], version, *first[11:15]))
    history = tuple(decode_messages(stored))
    run = run_from_row((*first[:8], first[29]))
    claimed = ClaimedRun(run=run, session=session, history=history)
    return claimed, (int(first[27]), int(first[28]))


async def append_batch(
    conn: Conn,
    batch: Mapping[str, Sequence[NewRunEvent]],
    lease_tokens: Mapping[str, int] | None = None,
) -> dict[str, list[RunEventRecord]]:
    """In autocommit (the statement is its own transaction, committed durably like any
    other write: a client may already have streamed an event, so a crash must not lose
    it and renumber the run's later events). A run whose token in ``lease_tokens`` is not
    its stored one (claimed since) gets none of its events written."""
    tokens = lease_tokens or {}
    todo = {run_id: list(events) for run_id, events in batch.items() if events}
    out: dict[str, list[RunEventRecord]] = {run_id: [] for run_id in batch}
    if not todo:
        return out
    rows = [event_row(run_id, 0, e) for run_id, events in todo.items() for e in events]
    params = (
        Texts([r[0] for r in rows]),
        Texts([r[2] for r in rows]),
        Floats([r[3] for r in rows]),
        Texts([r[4] for r in rows]),
        Ints([tokens.get(r[0]) for r in rows]),
    )
    for attempt in range(_RETRIES):
        try:
            rows = await (await conn.execute(_APPEND, params)).fetchall()
            last = {r[0]: r[1] for r in rows}
            break
        except pg_errors.UniqueViolation:
            if attempt == _RETRIES - 1:
                raise  # translated into a ConflictError by the store
    for run_id, events in todo.items():
        if run_id not in last:
            continue  # fenced off: nothing written
        first = int(last[run_id]) - len(events) + 1
        out[run_id] = [
            RunEventRecord(run_id=run_id, seq=first + i, type=e.type, at=e.at, data=e.data)
            for i, e in enumerate(events)
        ]
    return out


async def notify(conn: Conn, *, payloads: Sequence[str]) -> None:
    """In autocommit: one statement, its own (not durable) transaction; each payload is
    ``"<run_id> <last seq>"`` of events already committed."""
    await conn.execute(_NOTIFY, (Texts(payloads),))


async def read_events(
    conn: Conn, run_id: str, after: int, limit: int | None
) -> list[RunEventRecord]:
    rows = await (await conn.execute(_READ, (run_id, after, limit))).fetchall()
    return [event_from_row(r) for r in rows]


async def add_key(conn: Conn, key: ApiKey) -> None:
    """One statement (its own transaction in autocommit)."""
    cur = await conn.execute(_ADD_KEY, key_row(key))
    if cur.rowcount != 1:
        raise duplicate_key(key.id)


async def find_key(conn: Conn, key_hash: str) -> ApiKey | None:
    row = await (await conn.execute(_FIND_KEY, (key_hash,))).fetchone()
    return None if row is None else key_from_row(row)
