"""Retention on SQLite: a tombstone replaces the shared body row (every branch that
shares it sees the change), its expiry record goes to ``message_expiries`` keyed by the
body's integer key, and the recall index forgets the old text, all in the caller's one
``BEGIN IMMEDIATE`` transaction.

``message_expiries`` is created by the first expiry, in that same transaction, so a store
made before retention existed needs no migration and read commands never write.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence

from plait.adapters.stores.shared.retention import (
    check_restores,
    check_tombstones,
    decode_expiry,
    not_held,
)
from plait.adapters.stores.shared.rows import message_row
from plait.adapters.stores.shared.state import session_not_found
from plait.adapters.stores.sqlite import segments, tokens
from plait.domain.messages import Message
from plait.domain.recall import search_text
from plait.domain.retention import Expiry, Tombstone, expiry_to_dict

__all__ = ["expire", "expiries", "restore"]

_DDL = """CREATE TABLE IF NOT EXISTS message_expiries (
    message_pk INTEGER PRIMARY KEY, data TEXT NOT NULL)"""
_SESSION_EXISTS = "SELECT 1 FROM sessions WHERE id = ?"
_EXPIRED = "SELECT 1 FROM message_expiries WHERE message_pk = ?"
_REPLACE = "UPDATE messages SET text = ?, extra = ? WHERE pk = ?"
_RECORD = "INSERT INTO message_expiries (message_pk, data) VALUES (?, ?)"
_UNRECORD = "DELETE FROM message_expiries WHERE message_pk = ?"
_FTS_EXISTS = "SELECT 1 FROM sqlite_master WHERE name = 'message_fts'"
_FTS_FORGET = "UPDATE message_fts SET body = ? WHERE rowid = ?"
_READ = (
    "SELECT sm.message_id, e.data FROM session_messages AS sm "
    "JOIN message_expiries AS e ON e.message_pk = sm.message_pk "
    "WHERE sm.session_id = ? AND sm.seq BETWEEN ? AND ?"
)


def _keys(
    conn: sqlite3.Connection, session_id: str, messages: Sequence[Message]
) -> list[tuple[int, Message]]:
    if conn.execute(_SESSION_EXISTS, (session_id,)).fetchone() is None:
        raise session_not_found(session_id)
    conn.execute(_DDL)
    keys: list[tuple[int, Message]] = []
    parts = segments.segments(conn, session_id)
    for message in messages:
        found = segments.member(conn, session_id, message.id, parts)
        if found is None:
            raise not_held(session_id, message.id)  # the transaction rolls back
        keys.append((found[1], message))
    return keys


def _put_body(conn: sqlite3.Connection, pk: int, body: Message, indexed: bool) -> None:
    row = message_row(body)
    conn.execute(_REPLACE, (row[2], row[9], pk))
    tokens.forget(conn, pk)  # counted from the body it replaces
    if indexed:  # the recall index holds the body's text too
        conn.execute(_FTS_FORGET, (search_text(body), pk))


def expire(conn: sqlite3.Connection, session_id: str, tombstones: Sequence[Tombstone]) -> list[str]:
    """Run inside a write transaction."""
    check_tombstones(tombstones)
    records = {t.message.id: t.expiry for t in tombstones}
    keys = _keys(conn, session_id, [t.message for t in tombstones])
    indexed = conn.execute(_FTS_EXISTS).fetchone() is not None
    done: list[str] = []
    for pk, body in keys:
        if conn.execute(_EXPIRED, (pk,)).fetchone() is not None:
            continue
        _put_body(conn, pk, body, indexed)
        conn.execute(_RECORD, (pk, json.dumps(expiry_to_dict(records[body.id]))))
        done.append(body.id)
    return done


def restore(conn: sqlite3.Connection, session_id: str, messages: Sequence[Message]) -> list[str]:
    """Run inside a write transaction."""
    check_restores(messages)
    keys = _keys(conn, session_id, messages)
    indexed = conn.execute(_FTS_EXISTS).fetchone() is not None
    done: list[str] = []
    for pk, body in keys:
        if conn.execute(_EXPIRED, (pk,)).fetchone() is None:
            continue
        _put_body(conn, pk, body, indexed)
        conn.execute(_UNRECORD, (pk,))
        done.append(body.id)
    return done


def expiries(conn: sqlite3.Connection, session_id: str) -> dict[str, Expiry]:
    if conn.execute(_SESSION_EXISTS, (session_id,)).fetchone() is None:
        raise session_not_found(session_id)
    try:
        rows = [
            row
            for part in segments.ranges(conn, session_id)
            for row in conn.execute(_READ, part).fetchall()
        ]
    except sqlite3.OperationalError as error:
        if "no such table" in str(error):
            return {}  # nothing was ever expired in this store
        raise
    where = f"session {session_id!r}"
    return {mid: decode_expiry(json.loads(data), where) for mid, data in rows}
