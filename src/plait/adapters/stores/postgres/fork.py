"""Forks on PostgreSQL (the rules are the shared ones of :mod:`..shared.fork`; this module
only does the SQL). A branch shares its source's message bodies through segments (see
:mod:`.segments`), as on SQLite: no body is copied.
"""

from __future__ import annotations

import json
from typing import Any

from plait.adapters.stores.postgres import segments
from plait.adapters.stores.postgres.sql import SESSION_EXISTS, fetch_one
from plait.adapters.stores.shared.fork import (
    check_fork_commit,
    missing_point,
    record_from_dict,
    record_to_dict,
    reject_plain_session,
)
from plait.adapters.stores.shared.rows import session_row
from plait.adapters.stores.shared.state import session_not_found
from plait.application.ports import ForkCommit
from plait.domain.errors import CorruptStoreError
from plait.domain.forks import ForkRecord

__all__ = ["fork", "get_record", "message_seq"]

Conn = Any

_LOCK = "SELECT 1 FROM sessions WHERE id = %s FOR UPDATE"
_GET_RECORD = "SELECT data FROM fork_requests WHERE branch_session_id = %s"
_PUT_RECORD = "INSERT INTO fork_requests (branch_session_id, data) VALUES (%s, %s)"
_INSERT_SESSION = (
    "INSERT INTO sessions (id, created_at, owner, workspace, active_run_id, "
    "parent_session_id, fork_point_message_id, title, model) "
    "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)"
)


async def message_seq(conn: Conn, session_id: str, message_id: str) -> int | None:
    found = await segments.member(conn, session_id, message_id)
    if found is not None:
        return found[0]
    if await fetch_one(conn, SESSION_EXISTS, (session_id,)) is None:
        raise session_not_found(session_id)
    return None


async def get_record(conn: Conn, session_id: str) -> ForkRecord | None:
    row = await fetch_one(conn, _GET_RECORD, (session_id,))
    if row is None:
        return None
    try:
        return record_from_dict(json.loads(row[0]))
    except (ValueError, KeyError, TypeError) as error:
        raise CorruptStoreError(
            f"the fork record of session {session_id!r} cannot be read: {error}",
            session_id=session_id,
        ) from error


async def fork(conn: Conn, commit: ForkCommit) -> ForkRecord:
    """Inside a write transaction."""
    check_fork_commit(commit)
    branch, record = commit.branch, commit.record
    if await fetch_one(conn, SESSION_EXISTS, (branch.id,)) is not None:
        return await get_record(conn, branch.id) or reject_plain_session(branch.id)
    source = record.source_session_id
    # Lock the source so its prefix is read at one version while the branch is written.
    if await fetch_one(conn, _LOCK, (source,)) is None:
        raise session_not_found(source)
    point = await segments.member_at(conn, source, record.through_seq)
    if point is None or point[0] != record.through_message_id:
        raise missing_point(commit)
    await conn.execute(_INSERT_SESSION, session_row(branch))
    await segments.add_fork(conn, source, branch.id, record.through_seq)
    await conn.execute(_PUT_RECORD, (branch.id, json.dumps(record_to_dict(record))))
    return record
