"""Forks that do not copy on PostgreSQL: the same segments as :mod:`..sqlite.segments`
(a branch holds only its own membership rows; ``session_segments`` rows say which seq
ranges are which ancestor's rows; a session without them is all its own rows). The SQL
side (``plait_members``, ``plait_version``, the commit's and the claim's use of them) is
in :mod:`.functions`."""

from __future__ import annotations

from typing import Any

__all__ = ["OPEN_END", "add_fork", "member", "member_at", "ranges", "segments"]

Conn = Any
Segment = tuple[str, int, int]

OPEN_END = 2_147_483_647
"""The last seq of a session's own, open-ended segment (seqs are INTEGER)."""

_SEGMENTS = "SELECT owner_id, lo, hi FROM session_segments WHERE session_id = %s ORDER BY lo"
_PUT = "INSERT INTO session_segments (session_id, lo, hi, owner_id) VALUES (%s, %s, %s, %s)"
_BY_ID = "SELECT seq, message_pk FROM session_messages WHERE session_id = %s AND message_id = %s"
_AT = "SELECT message_id, message_pk FROM session_messages WHERE session_id = %s AND seq = %s"


async def segments(conn: Conn, session_id: str) -> list[Segment]:
    rows = await (await conn.execute(_SEGMENTS, (session_id,))).fetchall()
    if not rows:
        return [(session_id, 1, OPEN_END)]
    return [(str(owner), int(lo), int(hi)) for owner, lo, hi in rows]


async def ranges(
    conn: Conn, session_id: str, after: int = 0, upto: int = OPEN_END
) -> list[Segment]:
    """The segments clipped to seqs ``after+1..upto``, in seq order."""
    out: list[Segment] = []
    for owner, lo, hi in await segments(conn, session_id):
        first, last = max(lo, after + 1), min(hi, upto)
        if first <= last:
            out.append((owner, first, last))
    return out


async def member(conn: Conn, session_id: str, message_id: str) -> tuple[int, int] | None:
    """(seq, body key) of ``message_id`` in the session's history, or None."""
    for owner, lo, hi in await segments(conn, session_id):
        row = await (await conn.execute(_BY_ID, (owner, message_id))).fetchone()
        if row is not None and lo <= row[0] <= hi:
            return int(row[0]), int(row[1])
    return None


async def member_at(conn: Conn, session_id: str, seq: int) -> tuple[str, int] | None:
    """(message id, body key) at ``seq`` of the session's history, or None."""
    for owner, lo, hi in await segments(conn, session_id):
        if lo <= seq <= hi:
            row = await (await conn.execute(_AT, (owner, seq))).fetchone()
            return None if row is None else (str(row[0]), int(row[1]))
    return None


async def add_fork(conn: Conn, source: str, branch: str, through_seq: int) -> None:
    """The branch's segments: the source's up to ``through_seq``, then its own."""
    rows = [(branch, lo, hi, owner) for owner, lo, hi in await ranges(conn, source, 0, through_seq)]
    rows.append((branch, through_seq + 1, OPEN_END, branch))
    for row in rows:  # one per visible ancestor, and its own
        await conn.execute(_PUT, row)
