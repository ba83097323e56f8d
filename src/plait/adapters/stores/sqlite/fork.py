"""Forks on SQLite: the branch refers to its source's prefix by segments (see
:mod:`.segments`): no membership row and no body is copied, so a fork costs the
same at any prefix length. The session row, the segments and the request record are
written in the caller's one ``BEGIN IMMEDIATE`` transaction.

The ``fork_requests`` table is created by the first fork, in that same transaction, so a
store made before forks existed needs no migration and read commands never write.
"""

from __future__ import annotations

import json
import sqlite3

from plait.adapters.stores.shared.fork import (
    check_fork_commit,
    missing_point,
    record_from_dict,
    record_to_dict,
    reject_plain_session,
)
from plait.adapters.stores.shared.rows import session_row
from plait.adapters.stores.shared.state import session_not_found
from plait.adapters.stores.sqlite import segments
from plait.application.ports import ForkCommit
from plait.domain.errors import CorruptStoreError
from plait.domain.forks import ForkRecord

__all__ = ["fork", "get_record", "message_seq"]

_DDL = """CREATE TABLE IF NOT EXISTS fork_requests (
    branch_session_id TEXT PRIMARY KEY, data TEXT NOT NULL) WITHOUT ROWID"""
_GET_RECORD = "SELECT data FROM fork_requests WHERE branch_session_id = ?"
_PUT_RECORD = "INSERT INTO fork_requests (branch_session_id, data) VALUES (?, ?)"
_SESSION_EXISTS = "SELECT 1 FROM sessions WHERE id = ?"
_INSERT_SESSION = (
    "INSERT INTO sessions (id, created_at, owner, workspace, active_run_id, "
    "parent_session_id, fork_point_message_id, title, model) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
)


def message_seq(conn: sqlite3.Connection, session_id: str, message_id: str) -> int | None:
    found = segments.member(conn, session_id, message_id)
    if found is not None:
        return found[0]
    if conn.execute(_SESSION_EXISTS, (session_id,)).fetchone() is None:
        raise session_not_found(session_id)
    return None


def get_record(conn: sqlite3.Connection, session_id: str) -> ForkRecord | None:
    try:
        row = conn.execute(_GET_RECORD, (session_id,)).fetchone()
    except sqlite3.OperationalError as error:
        if "no such table" in str(error):
            return None  # no fork was ever made in this store
        raise
    if row is None:
        return None
    try:
        return record_from_dict(json.loads(row[0]))
    except (ValueError, KeyError, TypeError) as error:
        raise CorruptStoreError(
            f"the fork record of session {session_id!r} cannot be read: {error}",
            session_id=session_id,
        ) from error


def fork(conn: sqlite3.Connection, commit: ForkCommit) -> ForkRecord:
    """Run inside a write transaction."""
    check_fork_commit(commit)
    branch, record = commit.branch, commit.record
    if conn.execute(_SESSION_EXISTS, (branch.id,)).fetchone() is not None:
        return get_record(conn, branch.id) or reject_plain_session(branch.id)
    source = record.source_session_id
    if conn.execute(_SESSION_EXISTS, (source,)).fetchone() is None:
        raise session_not_found(source)
    point = segments.member_at(conn, source, record.through_seq)
    if point is None or point[0] != record.through_message_id:
        raise missing_point(commit)
    conn.execute(_INSERT_SESSION, session_row(branch))
    segments.add_fork(conn, source, branch.id, record.through_seq)
    conn.execute(_DDL)
    conn.execute(_PUT_RECORD, (branch.id, json.dumps(record_to_dict(record))))
    return record
