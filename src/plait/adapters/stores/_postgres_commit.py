"""PostgreSQL side of the commit ports (``start_run``/``commit``): one transaction that
locks the session row, checks the version, writes the run, its executions and messages.

The rules are the shared ones of :mod:`._state`; this module only does the SQL.
"""

from __future__ import annotations

from typing import Any

import psycopg

from plait.adapters.stores import _pg_sql as q
from plait.adapters.stores._sqlite_rows import execution_row, message_row, run_data
from plait.adapters.stores._state import (
    check_execution,
    duplicate_message,
    duplicate_run,
    resolve_lease,
    run_not_found,
    session_busy,
    session_not_found,
    version_conflict,
)
from plait.application.ports import Commit, CommitResult
from plait.domain.messages import Message
from plait.domain.session import ExecutionState

__all__ = ["apply"]

Conn = psycopg.AsyncConnection[Any]
_EXEC_STATE = {s.value: s for s in ExecutionState}


async def apply(conn: Conn, c: Commit, *, start: bool) -> CommitResult:
    """Inside a write transaction."""
    sid = c.session_id
    expected = c.expected_version
    # The row lock serializes writers of this session until the transaction ends.
    row = await (await conn.execute(q.LOCK_SESSION, (sid,))).fetchone()
    if row is None:
        raise session_not_found(sid)
    active = row[0]
    version = await (await conn.execute(q.SESSION_VERSION, (sid,))).fetchone()
    current = 0 if version is None else int(version[0])
    if start:
        if active is not None:
            raise session_busy(sid, active)
        if current != expected:
            raise version_conflict(sid, expected, current)
        await _insert_run(conn, c)
        cancel = False
    else:
        if current != expected:
            raise version_conflict(sid, expected, current)
        cancel = await _update_run(conn, c, active)
    if c.executions:
        await _put_executions(conn, c)
    if c.messages:
        await _put_messages(conn, sid, expected, c.messages)
    return CommitResult(expected + len(c.messages), cancel)


async def _insert_run(conn: Conn, c: Commit) -> None:
    run = c.run
    assert run is not None
    lease = run.lease
    cur = await conn.execute(
        q.INSERT_RUN,
        (
            run.id, c.session_id, run.status.value, run.started_at,
            None if lease is None else lease.owner,
            None if lease is None else lease.expires_at, run_data(run),
        ),
    )  # fmt: skip
    if cur.rowcount != 1:
        raise duplicate_run(run.id)
    if not run.status.terminal:
        await conn.execute(q.CLAIM_SESSION, (run.id, c.session_id))


async def _update_run(conn: Conn, c: Commit, active: str | None) -> bool:
    run = c.run
    sid = c.session_id
    if run is None:
        if active is None:
            return False
        flag = await (await conn.execute(q.RUN_CANCEL_FLAG, (active,))).fetchone()
        return flag is not None and bool(flag[0])
    fence = await (await conn.execute(q.RUN_FENCE, (run.id,))).fetchone()
    if fence is None or fence[0] != sid:
        raise run_not_found(run.id)
    lease = resolve_lease(run.id, fence[1], fence[2], run, c.lease_owner)
    await conn.execute(
        q.UPDATE_RUN,
        (
            run.status.value, run.started_at,
            None if lease is None else lease.owner,
            None if lease is None else lease.expires_at, run_data(run), run.id,
        ),
    )  # fmt: skip
    if run.status.terminal and active == run.id:
        await conn.execute(q.RELEASE_SESSION, (sid, run.id))
    return bool(fence[3])


async def _put_executions(conn: Conn, c: Commit) -> None:
    sid = c.session_id
    run = c.run
    for rec in c.executions:
        cur = await conn.execute(q.GET_EXECUTION, (sid, rec.run_id, rec.call_id))
        row = await cur.fetchone()
        if row is not None:
            check_execution(row[0], _EXEC_STATE[row[1]], rec)
        elif run is None or run.id != rec.run_id:
            owned = await (await conn.execute(q.RUN_IN_SESSION, (rec.run_id, sid))).fetchone()
            if owned is None:
                raise run_not_found(rec.run_id)
    rows = [execution_row(e) for e in c.executions]
    if len(rows) == 1:  # the usual case: executemany would enter pipeline mode for one row
        await conn.execute(q.UPSERT_EXECUTION, rows[0])
        return
    async with conn.cursor() as cur:
        await cur.executemany(q.UPSERT_EXECUTION, rows)


async def _put_messages(conn: Conn, sid: str, expected: int, messages: tuple[Message, ...]) -> None:
    for seq, m in enumerate(messages, expected + 1):
        row = message_row(m)
        params = (*row[:2], row[2].encode(), *row[3:], sid, seq, m.id)
        cur = await conn.execute(q.INSERT_MESSAGE, params)
        if await cur.fetchone() is None:
            raise duplicate_message(sid, m.id)
