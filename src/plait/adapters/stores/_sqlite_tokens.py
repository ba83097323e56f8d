"""Token counts per message and meter on SQLite (see
:class:`~plait.application.ports.TokenCountStore`).

Kept by message body (``message_pk``), so a fork that shares its parent's bodies shares
their counts too. The table is made by the first write; a store without it has no counts.
A body rewritten in place (retention's tombstone, or its restore) loses its counts.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping

__all__ = ["forget", "read", "save"]

_DDL = """CREATE TABLE IF NOT EXISTS message_tokens (
    message_pk INTEGER NOT NULL, meter TEXT NOT NULL, tokens INTEGER NOT NULL,
    PRIMARY KEY (message_pk, meter)) WITHOUT ROWID"""
_READ = (
    "SELECT sm.message_id, t.tokens FROM session_messages AS sm "
    "JOIN message_tokens AS t ON t.message_pk = sm.message_pk AND t.meter = ? "
    "WHERE sm.session_id = ?"
)
_SAVE = (
    "INSERT INTO message_tokens (message_pk, meter, tokens) "
    "SELECT message_pk, ?, ? FROM session_messages WHERE session_id = ? AND message_id = ? "
    "ON CONFLICT (message_pk, meter) DO UPDATE SET tokens = excluded.tokens"
)
_FORGET = "DELETE FROM message_tokens WHERE message_pk = ?"


def _missing_table(e: sqlite3.OperationalError) -> bool:
    return "no such table" in str(e)


def read(conn: sqlite3.Connection, session_id: str, meter: str) -> dict[str, int]:
    try:
        rows = conn.execute(_READ, (meter, session_id)).fetchall()
    except sqlite3.OperationalError as e:
        if _missing_table(e):
            return {}  # nothing was ever counted in this store
        raise
    return {str(mid): int(tokens) for mid, tokens in rows}


def save(conn: sqlite3.Connection, session_id: str, meter: str, counts: Mapping[str, int]) -> None:
    """Run inside a write transaction."""
    conn.execute(_DDL)
    conn.executemany(_SAVE, [(meter, int(n), session_id, mid) for mid, n in counts.items()])


def forget(conn: sqlite3.Connection, message_pk: int) -> None:
    """The counts of a body rewritten in place (inside its write transaction)."""
    try:
        conn.execute(_FORGET, (message_pk,))
    except sqlite3.OperationalError as e:
        if not _missing_table(e):
            raise
