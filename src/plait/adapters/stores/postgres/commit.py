"""PostgreSQL side of the commit ports (``start_run``/``commit``): one call of the
server-side function ``plait_commit`` (see :mod:`.functions`), which locks the
session row, checks its owner and version, writes the run, its executions and messages;
or, with pending run events (a worker's, see ``PostgresStore.attach_carrier``), of
``plait_commit_events``, which writes them in the same transaction after the commit.

One statement, so one round trip; run in autocommit it is its own transaction, committed
durably like any other (``synchronous_commit`` stays on). The rules are the shared ones
of :mod:`..shared.state`: the function reports a broken one by name with the stored values, and
this module builds the same error the other stores raise.
"""

from __future__ import annotations

import json
from typing import Any

import psycopg
from psycopg import errors as pg_errors

from plait.adapters.stores.postgres.arrays import Bytes, Floats, Ints, Texts
from plait.adapters.stores.postgres.context_cache import Stamp
from plait.adapters.stores.shared.rows import execution_row, message_row, run_data
from plait.adapters.stores.shared.service_rows import event_row
from plait.adapters.stores.shared.state import (
    check_execution,
    duplicate_message,
    duplicate_run,
    lease_lost,
    lease_taken,
    run_not_found,
    session_busy,
    session_not_found,
    version_conflict,
)
from plait.application.ports import CarriedEvents, Commit, CommitResult
from plait.domain.errors import CorruptStoreError, PlaitError
from plait.domain.service import RunEventRecord
from plait.domain.session import ExecutionState

__all__ = ["apply", "apply_with_events"]

Conn = psycopg.AsyncConnection[Any]

# Parameters in binary (text arrays of JSON would be escaped element by element), the
# arrays with their types given (see arrays.py).
_CALL = (
    "SELECT o_version, o_cancel, o_summaries, o_constraints FROM plait_commit("
    "%b::text, %b::integer, %b::boolean, %b::text, %b::text, %b::bigint, %b::text, "
    "%b::text, %b::text, %b::float8, %b::text, %b::float8, %b::text, %b::boolean, "
    "%b::text[], %b::text[], %b::text[], %b::text[], %b::text[], "
    "%b::text[], %b::text[], %b::bytea[], %b::float8[], %b::text[], %b::integer[], "
    "%b::text[], %b::text[], %b::text[], %b::text[], %b::integer[])"
)
_CALL_EVENTS = (
    _CALL.replace("plait_commit(", "plait_commit_events(")
    .replace("o_constraints FROM", "o_constraints, o_runs, o_last FROM")
    .replace(
        "%b::integer[])",
        "%b::integer[], %b::text[], %b::text[], %b::float8[], %b::text[], %b::integer[])",
    )
)
_EVENTS_KEY = "run_events_pkey"
_RETRIES = 5


def _params(commit: Commit, start: bool) -> tuple[Any, ...]:
    run = commit.run
    if run is None:
        run_part: tuple[Any, ...] = (None,) * 7
    else:
        lease = run.lease
        run_part = (
            run.id,
            run.status.value,
            run.started_at,
            None if lease is None else lease.owner,
            None if lease is None else lease.expires_at,
            run_data(run),
            run.status.terminal,
        )
    ex = [execution_row(e) for e in commit.executions]
    ms = [message_row(m) for m in commit.messages]
    executions = tuple(Texts([r[i] for r in ex]) for i in (1, 2, 3, 4, 5))
    messages = (
        Texts([r[0] for r in ms]),
        Texts([r[1] for r in ms]),
        Bytes([r[2].encode() for r in ms]),
        Floats([r[3] for r in ms]),
        Texts([r[4] for r in ms]),
        Ints([r[5] for r in ms]),
        Texts([r[6] for r in ms]),
        Texts([r[7] for r in ms]),
        Texts([r[8] for r in ms]),
        Texts([r[9] for r in ms]),
        Ints([r[10] for r in ms]),
    )
    head = (
        commit.session_id,
        commit.expected_version,
        start,
        commit.lease_owner,
        commit.session_owner,
        commit.lease_token,
        commit.lease_run_id,
    )
    return (*head, *run_part, *executions, *messages)


async def apply(conn: Conn, commit: Commit, *, start: bool) -> tuple[CommitResult, Stamp]:
    """One statement (in autocommit: its own transaction). Also returns the session's
    stamp as of the commit (see :mod:`.context_cache`)."""
    try:
        cur = await conn.execute(_CALL, _params(commit, start))
    except pg_errors.RaiseException as error:
        raise _refused(error, commit) from None
    row = await cur.fetchone()
    assert row is not None
    return CommitResult(int(row[0]), bool(row[1])), (int(row[2]), int(row[3]))


async def apply_with_events(
    conn: Conn, commit: Commit, carried: CarriedEvents, *, start: bool
) -> tuple[CommitResult, Stamp, dict[str, list[RunEventRecord]]]:
    """:func:`apply` and ``carried`` (run events, each run's fenced by its token and
    numbered after its last one) in the same statement, so the same transaction: all
    written or nothing. Returns, per run of ``carried``, the events as written (none
    for a run whose token is stale). Two writers of one run's events pick the same
    numbers only if one is a stale worker whose write is refused anyway; the primary
    key turns that into a unique violation, and the statement (rolled back whole) is
    tried again."""
    rows = [event_row(run_id, 0, e) for run_id, events in carried.events.items() for e in events]
    params = (
        *_params(commit, start),
        Texts([r[0] for r in rows]),
        Texts([r[2] for r in rows]),
        Floats([r[3] for r in rows]),
        Texts([r[4] for r in rows]),
        Ints([carried.tokens[r[0]] for r in rows]),
    )
    for attempt in range(_RETRIES):
        try:
            cur = await conn.execute(_CALL_EVENTS, params)
            break
        except pg_errors.RaiseException as error:
            raise _refused(error, commit) from None
        except pg_errors.UniqueViolation as error:
            if error.diag.constraint_name != _EVENTS_KEY or attempt == _RETRIES - 1:
                raise
    row = await cur.fetchone()
    assert row is not None
    last = dict(zip(row[4] or (), row[5] or (), strict=True))
    written: dict[str, list[RunEventRecord]] = {}
    for run_id, events in carried.events.items():
        if run_id not in last:
            written[run_id] = []  # fenced off: nothing written
            continue
        first = int(last[run_id]) - len(events) + 1
        written[run_id] = [
            RunEventRecord(run_id=run_id, seq=first + i, type=e.type, at=e.at, data=e.data)
            for i, e in enumerate(events)
        ]
    return CommitResult(int(row[0]), bool(row[1])), (int(row[2]), int(row[3])), written


def _refused(error: pg_errors.RaiseException, commit: Commit) -> PlaitError:
    """The store's error for a rule ``plait_commit`` found broken."""
    what = error.diag.message_primary or ""
    try:
        detail = json.loads(error.diag.message_detail or "[]")
    except ValueError:
        detail = None
    if not what.startswith("plait:") or not isinstance(detail, list):
        return CorruptStoreError(f"unexpected error from plait_commit: {error}")
    sid = commit.session_id
    match what[6:], detail:
        case "session_not_found", _:
            return session_not_found(sid)
        case "session_busy", [active]:
            return session_busy(sid, active)
        case "version_conflict", [current] if commit.expected_version is not None:
            return version_conflict(sid, commit.expected_version, current)
        case "duplicate_run", _ if commit.run is not None:
            return duplicate_run(commit.run.id)
        case "run_not_found", [run_id]:
            return run_not_found(run_id)
        case "lease_lost", [owner, expires_at] if commit.run is not None:
            return lease_lost(commit.run.id, owner, expires_at, wanted=commit.lease_owner)
        case "lease_taken", [token, ended] if commit.lease_token is not None:
            rid = commit.run.id if commit.run is not None else commit.lease_run_id or "?"
            return lease_taken(
                rid, token, commit.lease_token, ended=bool(ended), wanted=commit.lease_owner
            )
        case "execution", [index, digest, state]:
            try:
                check_execution(digest, ExecutionState(state), commit.executions[index])
            except PlaitError as refused:
                return refused
        case "duplicate_message", [message_id]:
            return duplicate_message(sid, message_id)
    return CorruptStoreError(f"unexpected error from plait_commit: {what} {detail}")
