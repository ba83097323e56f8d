"""Token counts per message and meter on PostgreSQL: the same rules as
:mod:`..sqlite.tokens` (kept by body key, so forks share them; a body rewritten in place
loses its counts)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["forget", "read", "save"]

Conn = Any

# Each member's count looked up by its key (a lateral subquery kept apart by ``OFFSET 0``):
# as a join, a plan kept while the table was small read every session's counts for each
# member until the table was analyzed again (see ``functions.py``, migration 23).
_READ = (
    "SELECT sm.message_id, t.tokens FROM plait_members(%s) AS sm "
    "CROSS JOIN LATERAL (SELECT x.tokens FROM message_tokens AS x "
    "WHERE x.message_pk = sm.message_pk AND x.meter = %s OFFSET 0) AS t"
)
_SAVE = (
    "INSERT INTO message_tokens (message_pk, meter, tokens) "
    "SELECT sm.message_pk, %s, c.tokens FROM unnest(%s::text[], %s::int[]) AS c (id, tokens) "
    "JOIN plait_members(%s) AS sm ON sm.message_id = c.id "
    "ON CONFLICT (message_pk, meter) DO UPDATE SET tokens = excluded.tokens"
)
_FORGET = "DELETE FROM message_tokens WHERE message_pk = %s"


async def read(conn: Conn, session_id: str, meter: str) -> dict[str, int]:
    rows = await (await conn.execute(_READ, (session_id, meter))).fetchall()
    return {str(mid): int(tokens) for mid, tokens in rows}


async def save(conn: Conn, session_id: str, meter: str, counts: Mapping[str, int]) -> None:
    ids = list(counts)
    await conn.execute(_SAVE, (meter, ids, [int(counts[i]) for i in ids], session_id))


async def forget(conn: Conn, message_pk: int) -> None:
    await conn.execute(_FORGET, (message_pk,))
