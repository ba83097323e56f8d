"""Retention on PostgreSQL: the same rules as :mod:`..sqlite.retention` (a tombstone
replaces the shared body row, so every branch sees it; the expiry record is keyed by the
body's key) in one transaction that first locks the session row."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from plait.adapters.stores.postgres import segments, tokens
from plait.adapters.stores.shared.retention import (
    check_restores,
    check_tombstones,
    decode_expiry,
    not_held,
)
from plait.adapters.stores.shared.rows import message_row
from plait.adapters.stores.shared.state import session_not_found
from plait.domain.messages import Message
from plait.domain.retention import Expiry, Tombstone, expiry_to_dict

__all__ = ["expire", "expiries", "restore"]

Conn = Any

_LOCK = "SELECT 1 FROM sessions WHERE id = %s FOR UPDATE"
_EXISTS = "SELECT 1 FROM sessions WHERE id = %s"
_EXPIRED = "SELECT 1 FROM message_expiries WHERE message_pk = %s FOR UPDATE"
_REPLACE = "UPDATE messages SET text = %s, extra = %s WHERE pk = %s"
_RECORD = "INSERT INTO message_expiries (message_pk, data) VALUES (%s, %s)"
_UNRECORD = "DELETE FROM message_expiries WHERE message_pk = %s"
# Nothing to look up while no message has expired anywhere (the usual case: one row read
# at most); else each member's record by its key, as the tokens' read (see tokens.py):
# as a join, a plan kept while the table was small read every session's records.
_READ = (
    "SELECT sm.message_id, e.data FROM plait_members(%s) AS sm "
    "CROSS JOIN LATERAL (SELECT x.data FROM message_expiries AS x "
    "WHERE x.message_pk = sm.message_pk OFFSET 0) AS e "
    "WHERE EXISTS (SELECT 1 FROM message_expiries)"
)


async def _keys(
    conn: Conn, session_id: str, messages: Sequence[Message]
) -> list[tuple[int, Message]]:
    if await (await conn.execute(_LOCK, (session_id,))).fetchone() is None:
        raise session_not_found(session_id)
    keys: list[tuple[int, Message]] = []
    for message in messages:
        found = await segments.member(conn, session_id, message.id)
        if found is None:
            raise not_held(session_id, message.id)  # the transaction rolls back
        keys.append((found[1], message))
    return keys


async def _put_body(conn: Conn, pk: int, body: Message) -> None:
    row = message_row(body)
    await conn.execute(_REPLACE, (row[2].encode(), row[9], pk))
    await tokens.forget(conn, pk)  # counted from the body it replaces


async def expire(conn: Conn, session_id: str, tombstones: Sequence[Tombstone]) -> list[str]:
    """Run inside a transaction."""
    check_tombstones(tombstones)
    records = {t.message.id: t.expiry for t in tombstones}
    done: list[str] = []
    for pk, body in await _keys(conn, session_id, [t.message for t in tombstones]):
        if await (await conn.execute(_EXPIRED, (pk,))).fetchone() is not None:
            continue
        await _put_body(conn, pk, body)
        await conn.execute(_RECORD, (pk, json.dumps(expiry_to_dict(records[body.id]))))
        done.append(body.id)
    return done


async def restore(conn: Conn, session_id: str, messages: Sequence[Message]) -> list[str]:
    """Run inside a transaction."""
    check_restores(messages)
    done: list[str] = []
    for pk, body in await _keys(conn, session_id, messages):
        if await (await conn.execute(_EXPIRED, (pk,))).fetchone() is None:
            continue
        await _put_body(conn, pk, body)
        await conn.execute(_UNRECORD, (pk,))
        done.append(body.id)
    return done


async def expiries(conn: Conn, session_id: str) -> dict[str, Expiry]:
    if await (await conn.execute(_EXISTS, (session_id,))).fetchone() is None:
        raise session_not_found(session_id)
    rows = await (await conn.execute(_READ, (session_id,))).fetchall()
    where = f"session {session_id!r}"
    return {mid: decode_expiry(json.loads(data), where) for mid, data in rows}
