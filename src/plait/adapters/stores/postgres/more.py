"""PostgreSQL side of the fork and summary ports (the rules are the shared ones of
:mod:`._fork` and :mod:`._summary_state`; this module only does the SQL).

Forks share message bodies through membership rows, as on SQLite. Summary activation and
constraint writes lock the session row first, so two compactions of one session serialize
and the compare-and-set on the generation is exact. Recall (``search_history``) scans the
session's own prefix newest first, in batches, with the domain's ``matches`` rule, and
stops at ``limit``: correct for every text, without a server extension.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from plait.adapters.stores.postgres import segments as _pg_segments
from plait.adapters.stores.shared.codec import dumps
from plait.adapters.stores.shared.fork import (
    check_fork_commit,
    missing_point,
    record_from_dict,
    record_to_dict,
    reject_plain_session,
)
from plait.adapters.stores.shared.rows import decode_messages, json_value, session_row
from plait.adapters.stores.shared.state import session_not_found
from plait.adapters.stores.shared.summary_codec import summary_from_dict, summary_to_dict
from plait.adapters.stores.shared.summary_state import (
    check_activation,
    duplicate_summary,
    new_constraints,
)
from plait.application.ports import ForkCommit
from plait.domain.errors import CorruptStoreError
from plait.domain.forks import ForkRecord
from plait.domain.recall import matches, search_terms
from plait.domain.session import Session, StoredMessage
from plait.domain.summary import Constraint, Summary

__all__ = [
    "activate",
    "active_and_constraints",
    "add_constraints",
    "fork",
    "get_active",
    "get_record",
    "list_constraints",
    "list_summaries",
    "message_seq",
    "search",
]

Conn = Any

_EXISTS = "SELECT 1 FROM sessions WHERE id = %s"
_LOCK = "SELECT 1 FROM sessions WHERE id = %s FOR UPDATE"
_VERSION = "SELECT plait_version(%s)"
_GET_RECORD = "SELECT data FROM fork_requests WHERE branch_session_id = %s"
_PUT_RECORD = "INSERT INTO fork_requests (branch_session_id, data) VALUES (%s, %s)"
_INSERT_SESSION = (
    "INSERT INTO sessions (id, created_at, owner, workspace, active_run_id, "
    "parent_session_id, fork_point_message_id, title, model) "
    "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)"
)
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


async def _fetchone(conn: Conn, sql: str, params: tuple[Any, ...]) -> Any:
    return await (await conn.execute(sql, params)).fetchone()


async def _session(conn: Conn, session_id: str, *, lock: bool = False) -> Session:
    if await _fetchone(conn, _LOCK if lock else _EXISTS, (session_id,)) is None:
        raise session_not_found(session_id)
    row = await _fetchone(conn, _VERSION, (session_id,))
    return Session(id=session_id, created_at=0.0, version=int(row[0]))


# --- forks ----------------------------------------------------------------------------------


async def message_seq(conn: Conn, session_id: str, message_id: str) -> int | None:
    found = await _pg_segments.member(conn, session_id, message_id)
    if found is not None:
        return found[0]
    if await _fetchone(conn, _EXISTS, (session_id,)) is None:
        raise session_not_found(session_id)
    return None


async def get_record(conn: Conn, session_id: str) -> ForkRecord | None:
    row = await _fetchone(conn, _GET_RECORD, (session_id,))
    if row is None:
        return None
    try:
        return record_from_dict(json.loads(row[0]))
    except (ValueError, KeyError, TypeError) as e:
        raise CorruptStoreError(
            f"the fork record of session {session_id!r} cannot be read: {e}",
            session_id=session_id,
        ) from e


async def fork(conn: Conn, commit: ForkCommit) -> ForkRecord:
    """Inside a write transaction."""
    check_fork_commit(commit)
    branch, record = commit.branch, commit.record
    if await _fetchone(conn, _EXISTS, (branch.id,)) is not None:
        return await get_record(conn, branch.id) or reject_plain_session(branch.id)
    source = record.source_session_id
    # Lock the source so its prefix is read at one version while the branch is written.
    if await _fetchone(conn, _LOCK, (source,)) is None:
        raise session_not_found(source)
    point = await _pg_segments.member_at(conn, source, record.through_seq)
    if point is None or point[0] != record.through_message_id:
        raise missing_point(commit)
    await conn.execute(_INSERT_SESSION, session_row(branch))
    await _pg_segments.add_fork(conn, source, branch.id, record.through_seq)
    await conn.execute(_PUT_RECORD, (branch.id, json.dumps(record_to_dict(record))))
    return record


# --- summaries and constraints -------------------------------------------------------------


async def _active(conn: Conn, session_id: str) -> Summary | None:
    row = await _fetchone(conn, _ACTIVE, (session_id,))
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
    row = await _fetchone(conn, _SESSION_ACTIVE, (session_id,))
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
    for c in added:
        await conn.execute(_ADD_CONSTRAINT, (session_id, c.source_message_id, c.text))
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
    for owner, lo, hi in reversed(await _pg_segments.ranges(conn, session_id, 0, upto)):
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
