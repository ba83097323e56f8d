"""Summaries, constraints and recall on PostgreSQL (the rules are the shared ones of
:mod:`..shared.summary_state`; this module only does the SQL).

Summary activation and constraint writes lock the session row first, so two compactions
of one session serialize and the compare-and-set on the generation is exact. Recall
(``search_history``) scans the session's own prefix newest first, in batches, with the
domain's ``matches`` rule, and stops at ``limit``: correct for every text, without a
server extension.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from plait.adapters.stores.postgres import segments
from plait.adapters.stores.postgres.sql import SESSION_EXISTS, fetch_one
from plait.adapters.stores.shared.codec import dumps
from plait.adapters.stores.shared.rows import decode_messages, json_value
from plait.adapters.stores.shared.state import session_not_found
from plait.adapters.stores.shared.summary_codec import summary_from_dict, summary_to_dict
from plait.adapters.stores.shared.summary_state import (
    check_activation,
    duplicate_summary,
    new_constraints,
)
from plait.domain.recall import matches, search_terms
from plait.domain.session import Session, StoredMessage
from plait.domain.summary import Constraint, Summary

__all__ = [
    "activate",
    "active_and_constraints",
    "add_constraints",
    "get_active",
    "list_constraints",
    "list_summaries",
    "search",
]

Conn = Any

_LOCK = "SELECT 1 FROM sessions WHERE id = %s FOR UPDATE"
_VERSION = "SELECT plait_version(%s)"
_ACTIVE = "SELECT data FROM summaries WHERE session_id = %s ORDER BY generation DESC LIMIT 1"
_ALL = "SELECT data FROM summaries WHERE session_id = %s ORDER BY generation"
_INSERT_SUMMARY = (
    "INSERT INTO summaries (session_id, generation, id, covered_through_seq, data) "
    "VALUES (%s, %s, %s, %s, %s) ON CONFLICT DO NOTHING"
)
# The reads a run makes every step, one statement each: no row means no such session.
_SESSION_ACTIVE = (
    "SELECT (SELECT data FROM summaries WHERE session_id = s.id ORDER BY generation DESC "
    "LIMIT 1) FROM sessions AS s WHERE s.id = %s"
)
_SESSION_CONSTRAINTS = (
    "SELECT c.source_message_id, c.text FROM sessions AS s LEFT JOIN constraint_records AS c "
    "ON c.session_id = s.id WHERE s.id = %s ORDER BY c.ord"
)
# Both in one statement (the context of every step reads them): the active summary on
# every row, one row per constraint (one with NULLs when there is none).
_SESSION_STATE = (
    "SELECT (SELECT data FROM summaries WHERE session_id = s.id ORDER BY generation DESC "
    "LIMIT 1), c.source_message_id, c.text FROM sessions AS s "
    "LEFT JOIN constraint_records AS c ON c.session_id = s.id WHERE s.id = %s ORDER BY c.ord"
)
_ADD_CONSTRAINT = (
    "INSERT INTO constraint_records (session_id, source_message_id, text) VALUES (%s, %s, %s)"
)
_SCAN = (
    "SELECT sm.seq, m.kind, m.id, m.text, m.created_at, m.run_id, m.step, m.call_id, m.name, "
    "m.status, m.extra, m.schema_version FROM session_messages AS sm "
    "JOIN messages AS m ON m.pk = sm.message_pk "
    "WHERE sm.session_id = %s AND sm.seq BETWEEN %s AND %s ORDER BY sm.seq DESC LIMIT 500"
)


async def _session(conn: Conn, session_id: str, *, lock: bool = False) -> Session:
    if await fetch_one(conn, _LOCK if lock else SESSION_EXISTS, (session_id,)) is None:
        raise session_not_found(session_id)
    row = await fetch_one(conn, _VERSION, (session_id,))
    return Session(id=session_id, created_at=0.0, version=int(row[0]))


async def _active(conn: Conn, session_id: str) -> Summary | None:
    row = await fetch_one(conn, _ACTIVE, (session_id,))
    return None if row is None else summary_from_dict(json_value(row[0], "summary"))


async def activate(conn: Conn, summary: Summary, expected_generation: int) -> None:
    """Inside a write transaction."""
    session = await _session(conn, summary.session_id, lock=True)
    check_activation(session, await _active(conn, summary.session_id), summary, expected_generation)
    data = dumps(summary_to_dict(summary))
    cur = await conn.execute(
        _INSERT_SUMMARY,
        (summary.session_id, summary.generation, summary.id, summary.covered_through_seq, data),
    )
    if cur.rowcount != 1:
        raise duplicate_summary(summary.id)


async def get_active(conn: Conn, session_id: str) -> Summary | None:
    row = await fetch_one(conn, _SESSION_ACTIVE, (session_id,))
    if row is None:
        raise session_not_found(session_id)
    return None if row[0] is None else summary_from_dict(json_value(row[0], "summary"))


async def active_and_constraints(
    conn: Conn, session_id: str
) -> tuple[Summary | None, list[Constraint]]:
    rows = await (await conn.execute(_SESSION_STATE, (session_id,))).fetchall()
    if not rows:
        raise session_not_found(session_id)
    data = rows[0][0]
    summary = None if data is None else summary_from_dict(json_value(data, "summary"))
    listed = [Constraint(source_message_id=r[1], text=r[2]) for r in rows if r[1] is not None]
    return summary, listed


async def list_summaries(conn: Conn, session_id: str) -> list[Summary]:
    await _session(conn, session_id)
    rows = await (await conn.execute(_ALL, (session_id,))).fetchall()
    return [summary_from_dict(json_value(r[0], "summary")) for r in rows]


async def list_constraints(conn: Conn, session_id: str) -> list[Constraint]:
    rows = await (await conn.execute(_SESSION_CONSTRAINTS, (session_id,))).fetchall()
    if not rows:
        raise session_not_found(session_id)
    return [Constraint(source_message_id=r[0], text=r[1]) for r in rows if r[0] is not None]


async def add_constraints(
    conn: Conn, session_id: str, constraints: Sequence[Constraint]
) -> list[Constraint]:
    """Inside a write transaction."""
    await _session(conn, session_id, lock=True)
    added = new_constraints(await list_constraints(conn, session_id), list(constraints))
    for constraint in added:
        await conn.execute(
            _ADD_CONSTRAINT, (session_id, constraint.source_message_id, constraint.text)
        )
    return added


async def search(
    conn: Conn, session_id: str, query: str, through_seq: int | None, limit: int
) -> list[StoredMessage]:
    terms = search_terms(query)
    session = await _session(conn, session_id)
    if limit <= 0:
        return []
    upto = session.version if through_seq is None else through_seq
    hits: list[StoredMessage] = []
    # newest first: the segments (disjoint seq ranges) from the last one back, 500 a page
    for owner, lo, hi in reversed(await segments.ranges(conn, session_id, 0, upto)):
        while hi >= lo:
            rows = await (await conn.execute(_SCAN, (owner, lo, hi))).fetchall()
            if not rows:
                break
            decoded = decode_messages([(*r[:3], r[3].decode(), *r[4:]) for r in rows])
            for sm in decoded:
                if matches(terms, sm.message):
                    hits.append(sm)
                    if len(hits) >= limit:
                        return hits
            hi = decoded[-1].seq - 1
    return hits
