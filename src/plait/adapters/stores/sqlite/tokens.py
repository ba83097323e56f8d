"""Token counts per message and meter on SQLite (see
:class:`~plait.application.ports.TokenCountStore`).

Kept by message body (``message_pk``), so a fork that shares its parent's bodies shares
their counts too. The table is made by the first write; a store without it has no counts.
A body rewritten in place (retention's tombstone, or its restore) loses its counts.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping

from plait.adapters.stores.sqlite import segments

__all__ = ["forget", "read", "save"]

_DDL = """CREATE TABLE IF NOT EXISTS message_tokens (
    message_pk INTEGER NOT NULL, meter TEXT NOT NULL, tokens INTEGER NOT NULL,
    PRIMARY KEY (message_pk, meter)) WITHOUT ROWID"""
_READ = (
    "SELECT sm.message_id, t.tokens FROM session_messages AS sm "
    "JOIN message_tokens AS t ON t.message_pk = sm.message_pk AND t.meter = ? "
    "WHERE sm.session_id = ? AND sm.seq BETWEEN ? AND ?"
)
_SAVE = (
    "INSERT INTO message_tokens (message_pk, meter, tokens) VALUES (?, ?, ?) "
    "ON CONFLICT (message_pk, meter) DO UPDATE SET tokens = excluded.tokens"
)
_FORGET = "DELETE FROM message_tokens WHERE message_pk = ?"


def _missing_table(error: sqlite3.OperationalError) -> bool:
    return "no such table" in str(error)


def read(conn: sqlite3.Connection, session_id: str, meter: str) -> dict[str, int]:
    try:
        rows = [
            row
            for part in segments.ranges(conn, session_id)
            for row in conn.execute(_READ, (meter, *part)).fetchall()
        ]
    except sqlite3.OperationalError as error:
        if _missing_table(error):
            return {}  # nothing was ever counted in this store
        raise
    return {str(mid): int(tokens) for mid, tokens in rows}


def save(conn: sqlite3.Connection, session_id: str, meter: str, counts: Mapping[str, int]) -> None:
    """Run inside a write transaction."""
    conn.execute(_DDL)
    parts = segments.segments(conn, session_id)
    rows = []
    for message_id, tokens in counts.items():
        found = segments.member(conn, session_id, message_id, parts)
        if found is not None:
            rows.append((found[1], meter, int(tokens)))
    conn.executemany(_SAVE, rows)


def forget(conn: sqlite3.Connection, message_pk: int) -> None:
    """The counts of a body rewritten in place (inside its write transaction)."""
    try:
        conn.execute(_FORGET, (message_pk,))
    except sqlite3.OperationalError as error:
        if not _missing_table(error):
            raise
