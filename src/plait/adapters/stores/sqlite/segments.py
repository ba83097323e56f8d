"""A session's history as segments of membership rows (forks that do not copy).

A plain session holds its history as its own membership rows ``(session_id, seq,
message_id, message_pk)``. A branch holds only the messages appended after its fork
point; its prefix stays in the rows of the sessions it was forked from. The branch's
``session_segments`` rows say where each seq range lives: ``(session_id, lo, hi,
owner_id)`` means seqs ``lo..hi`` of ``session_id`` are ``owner_id``'s rows at those
seqs. A fork copies its source's segments clipped at the fork point (a handful, one per
ancestor still visible) and adds its own open-ended one, so its cost does not grow with
the prefix; a fork of a fork resolves to the original owners directly (no chain walk at
read time). A session without segment rows (every plain session, and every branch made
before segments existed, which holds copied rows) is one segment: all its own rows.

Bodies are shared by key, so a tombstone written into a parent's body (retention) is
what every branch reads at that seq.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator

__all__ = [
    "DDL",
    "OPEN_END",
    "Segment",
    "add_fork",
    "ancestor_seq_of",
    "member",
    "member_at",
    "segments",
    "through",
]

OPEN_END = 1 << 62

DDL = """CREATE TABLE IF NOT EXISTS session_segments (
    session_id TEXT NOT NULL, lo INTEGER NOT NULL, hi INTEGER NOT NULL,
    owner_id TEXT NOT NULL, PRIMARY KEY (session_id, lo)) WITHOUT ROWID"""

Segment = tuple[str, int, int]
"""(owner session, first seq, last seq)."""

_SEGMENTS = "SELECT owner_id, lo, hi FROM session_segments WHERE session_id = ? ORDER BY lo"
_PUT = "INSERT INTO session_segments (session_id, lo, hi, owner_id) VALUES (?, ?, ?, ?)"
_BY_ID = "SELECT seq, message_pk FROM session_messages WHERE session_id = ? AND message_id = ?"
_AT = "SELECT message_id, message_pk FROM session_messages WHERE session_id = ? AND seq = ?"


def segments(conn: sqlite3.Connection, session_id: str) -> list[Segment]:
    """The session's segments in seq order (one, its own rows, for a plain session)."""
    rows = conn.execute(_SEGMENTS, (session_id,)).fetchall()
    if not rows:
        return [(session_id, 1, OPEN_END)]
    return [(str(owner), int(lo), int(hi)) for owner, lo, hi in rows]


def through(parts: list[Segment], session_id: str) -> int:
    """The highest seq the session inherits (0 for a plain session)."""
    return max((hi for owner, _lo, hi in parts if owner != session_id), default=0)


def member(
    conn: sqlite3.Connection, session_id: str, message_id: str, parts: list[Segment] | None = None
) -> tuple[int, int] | None:
    """(seq, body key) of ``message_id`` in the session's history, or None."""
    for owner, lo, hi in parts if parts is not None else segments(conn, session_id):
        row = conn.execute(_BY_ID, (owner, message_id)).fetchone()
        if row is not None and lo <= row[0] <= hi:
            return int(row[0]), int(row[1])
    return None


def ancestor_seq_of(
    conn: sqlite3.Connection, session_id: str, message_id: str, parts: list[Segment]
) -> int | None:
    """Seq of ``message_id`` in the inherited part of the history (not the own rows)."""
    own = [(o, lo, hi) for o, lo, hi in parts if o != session_id]
    found = member(conn, session_id, message_id, own) if own else None
    return None if found is None else found[0]


def member_at(conn: sqlite3.Connection, session_id: str, seq: int) -> tuple[str, int] | None:
    """(message id, body key) at ``seq`` of the session's history, or None."""
    for owner, lo, hi in segments(conn, session_id):
        if lo <= seq <= hi:
            row = conn.execute(_AT, (owner, seq)).fetchone()
            return None if row is None else (str(row[0]), int(row[1]))
    return None


def ranges(
    conn: sqlite3.Connection, session_id: str, after: int = 0, upto: int = OPEN_END
) -> Iterator[Segment]:
    """The segments clipped to seqs ``after+1..upto``, in seq order."""
    for owner, lo, hi in segments(conn, session_id):
        first, last = max(lo, after + 1), min(hi, upto)
        if first <= last:
            yield owner, first, last


def add_fork(conn: sqlite3.Connection, source: str, branch: str, through_seq: int) -> None:
    """The branch's segments: the source's up to ``through_seq``, then its own."""
    rows = [(branch, lo, hi, owner) for owner, lo, hi in ranges(conn, source, 0, through_seq)]
    rows.append((branch, through_seq + 1, OPEN_END, branch))
    conn.executemany(_PUT, rows)
