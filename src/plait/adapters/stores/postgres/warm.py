"""Connections made ready for a worker's runs before its first claim.

A new connection's backend compiles each PL/pgSQL function at its first call and plans
each statement in it at its first execution, then plans it again at each of the next
four (PostgreSQL's plan cache tries parameter-specific plans five times before it keeps
a generic one). Measured here on an idle machine: a fresh connection's first claim took
about 5 ms, its first step commit about 3 ms, the next five of each about 1.2 ms, then
0.7 ms. A worker that starts serving at once pays that in its first runs' steps, when
every process is cold and the machine busiest (the service's slowest steps were there).

:func:`warm` runs a worker's statements on a connection in a transaction that is always
rolled back: a scratch session and queued run (created in that transaction, so no other
connection ever sees them), the claim of it, a step's commit with its events, and the
run's final commit, :data:`ROUNDS` times. What the backend compiled and planned outlives
the rollback (psycopg forgets the statements it prepared at any rollback, so those are
prepared at their sixth use as before); nothing written does (sequence values aside). The
scratch run sorts before any real queued run (its start time is :data:`_STARTED_AT`);
should the claim still take a real one, the round stops there and the rollback leaves
that run as it was (other workers' claims skip it for those milliseconds).
"""

from __future__ import annotations

import dataclasses
import secrets
from typing import Any

import psycopg

from plait.adapters.stores.postgres import service
from plait.adapters.stores.postgres import sql as q
from plait.adapters.stores.postgres.commit import apply, apply_with_events
from plait.adapters.stores.shared.rows import session_row
from plait.application.ports import CarriedEvents, Commit
from plait.domain.messages import (
    AssistantMessage,
    Message,
    ToolCall,
    ToolResult,
    ToolResultMessage,
    ToolStatus,
    UserMessage,
)
from plait.domain.runs import Budget, Run, RunStatus
from plait.domain.service import EventType, NewRunEvent
from plait.domain.session import ExecutionRecord, ExecutionState, Session
from plait.domain.tools import EffectClass

__all__ = ["ROUNDS", "warm"]

Conn = psycopg.AsyncConnection[Any]

ROUNDS = 6
"""Past PostgreSQL's five parameter-specific plans of each statement."""

_STARTED_AT = -1.0
"""The scratch run's start time: before any real run's (queued runs are claimed oldest
first)."""
_AT = 1.0
_OWNER = "warm-up"


async def warm(conn: Conn, rounds: int = ROUNDS) -> None:
    """Run a worker's statements ``rounds`` times on ``conn`` in one transaction, rolled
    back. Raises what the statements raise (the caller decides what a failure means)."""
    async with conn.transaction(force_rollback=True):
        for _ in range(rounds):
            if not await _round(conn):
                return


def _id(prefix: str) -> str:
    return f"{prefix}_warm{secrets.token_hex(10)}"


async def _round(conn: Conn) -> bool:
    """One scratch run from submission to end; False if the claim took another run."""
    session = Session(id=_id("ses"), created_at=_AT)
    await conn.execute(q.INSERT_SESSION, session_row(session))
    run = Run(
        id=_id("run"),
        session_id=session.id,
        status=RunStatus.QUEUED,
        budget=Budget(),
        started_at=_STARTED_AT,
    )
    user = UserMessage(id=_id("msg"), text="warm-up", created_at=_AT, run_id=run.id)
    submission = Commit(session_id=session.id, expected_version=None, messages=(user,), run=run)
    await apply(conn, submission, start=True)

    found = await service.claim_started(conn, _OWNER, _AT, _AT + 60.0, "warm-up", None)
    if found is None or found[0].run.id != run.id:
        return False
    claimed = found[0].run
    call = ToolCall.create(id="call_warm", name="warm", arguments={"n": 1})
    record = ExecutionRecord(
        session_id=session.id,
        run_id=run.id,
        call_id=call.id,
        tool_name=call.name,
        effect=EffectClass.IDEMPOTENT,
        args_digest="warm-up",
        idempotency_key=_id("key"),
        state=ExecutionState.STARTED,
        requested_at=_AT,
        started_at=_AT,
    )
    asked = AssistantMessage(
        id=_id("msg"), text="", created_at=_AT, tool_calls=(call,), run_id=run.id, step=1
    )
    await _step(conn, 1, (asked,), claimed, record, events=3)

    result = ToolResultMessage(
        id=_id("msg"),
        tool_name=call.name,
        result=ToolResult(call_id=call.id, status=ToolStatus.SUCCEEDED, content="ok"),
        created_at=_AT,
        run_id=run.id,
        step=1,
    )
    answer = AssistantMessage(id=_id("msg"), text="done", created_at=_AT, run_id=run.id, step=2)
    ended = dataclasses.replace(claimed, status=RunStatus.COMPLETED, ended_at=_AT, lease=None)
    settled = dataclasses.replace(
        record,
        state=ExecutionState.SETTLED,
        settled_at=_AT,
        result_status=ToolStatus.SUCCEEDED,
    )
    await _step(conn, 2, (result, answer), ended, settled, events=2)
    return True


async def _step(
    conn: Conn,
    version: int,
    messages: tuple[Message, ...],
    run: Run,
    execution: ExecutionRecord,
    *,
    events: int,
) -> None:
    """A commit as a worker's step makes it: fenced by the claim's owner and token, with
    ``events`` pending events of the run."""
    commit = Commit(
        session_id=run.session_id,
        expected_version=version,
        messages=messages,
        run=run,
        executions=(execution,),
        lease_owner=_OWNER,
        lease_token=run.lease_token,
        lease_run_id=run.id,
    )
    pending = tuple(
        NewRunEvent(type=EventType.STEP_STARTED, at=_AT, data={"step": k}) for k in range(events)
    )
    carried = CarriedEvents({run.id: pending}, {run.id: run.lease_token})
    await apply_with_events(conn, commit, carried, start=False)
