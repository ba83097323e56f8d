"""The writes of history on SQLite: a new session (:meth:`SqliteStore.create_session`)
and one commit (:meth:`SqliteStore.commit` and ``start_run``): the checks and writes of a
:class:`~plait.application.ports.Commit`, inside the caller's one ``BEGIN IMMEDIATE``
transaction, which holds the write lock, so check-then-write is safe. (A process's first
write loads this module and what it needs: opening a store does not.)

The version compare-and-set turns a lost race into
:class:`~plait.domain.errors.ConflictError`, never an interleaving; the run's lease is
fenced against the stored one, so a process that lost it cannot write.
"""

from __future__ import annotations

import sqlite3
from typing import TYPE_CHECKING, Any

from plait.adapters.stores.shared.rows import execution_row, message_row, run_data, session_row
from plait.adapters.stores.shared.state import (
    STATE_ORDER,
    check_execution,
    check_token,
    duplicate_message,
    duplicate_run,
    duplicate_session,
    resolve_lease,
    run_not_found,
    session_busy,
    session_not_found,
    version_conflict,
)
from plait.adapters.stores.sqlite import segments
from plait.adapters.stores.sqlite.conn import GET_SESSION, RUN_COLS, VERSION_OF
from plait.application.ports import CommitResult
from plait.domain.errors import StoreError
from plait.domain.messages import Message
from plait.domain.runs import Run, RunStatus
from plait.domain.session import ExecutionState

if TYPE_CHECKING:
    from plait.application.ports import Commit  # built by the application
    from plait.domain.session import Session

__all__ = ["Checked", "apply", "checked_run", "insert_session"]

_INSERT_SESSION = (
    "INSERT INTO sessions (id, created_at, owner, workspace, active_run_id, "
    "parent_session_id, fork_point_message_id, title, model) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
)


def insert_session(conn: sqlite3.Connection, session: Session) -> None:
    """A new session's row; :class:`~plait.domain.errors.ConflictError` if its id is
    taken."""
    try:
        conn.execute(_INSERT_SESSION, session_row(session))
    except sqlite3.IntegrityError:
        raise duplicate_session(session.id) from None


_SESSION_AND_RUN = (
    f"SELECT {VERSION_OF}, s.active_run_id, r.session_id, r.lease_owner, r.lease_expires_at, "
    "r.cancel_requested, s.owner, r.lease_token, r.status, r.id, r.started_at, "
    "EXISTS (SELECT 1 FROM session_segments WHERE session_id = s.id) FROM sessions AS s "
    "LEFT JOIN runs AS r ON r.id = coalesce(?, s.active_run_id) WHERE s.id = ?"
)
"""The session's version, active run and owner, whether it is a branch (has segments),
with the commit's run (else the active one)."""
_SET_ACTIVE = "UPDATE sessions SET active_run_id = ? WHERE id = ? AND active_run_id IS ?"
"""A run's start claims the session ``(run, session, None)``, its end releases it
``(None, session, run)``: one statement for both (a run's path compiles one fewer)."""
_INSERT_MESSAGE = (
    "INSERT INTO messages (id, kind, text, created_at, run_id, step, call_id, name, status, "
    "extra, schema_version) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
_INSERT_MEMBER = (
    "INSERT INTO session_messages (session_id, seq, message_id, message_pk) VALUES (?, ?, ?, ?)"
)
_IS_MEMBER = "SELECT 1 FROM session_messages WHERE session_id = ? AND message_id = ?"
_INSERT_RUN = (
    f"INSERT INTO runs ({RUN_COLS}) VALUES (?, ?, ?, ?, ?, ?, 0, ?, ?) ON CONFLICT (id) DO NOTHING"
)
_UPDATE_RUN = (
    "UPDATE runs SET status = ?, started_at = ?, lease_owner = ?, lease_expires_at = ?, "
    "data = ? WHERE id = ?"
)
_UPDATE_RUN_STATE = "UPDATE runs SET lease_owner = ?, lease_expires_at = ?, data = ? WHERE id = ?"
"""A step's update of its run (status and start unchanged): an UPDATE rewrites the entry
of every index on a column it sets, so this one leaves the three indexes on ``status``
and ``started_at`` alone (three pages fewer in every step's commit)."""
_UPDATE_RUN_STATUS = (
    "UPDATE runs SET status = ?, lease_owner = ?, lease_expires_at = ?, data = ? WHERE id = ?"
)
"""A run's end or wait (its start unchanged): the two indexes on ``started_at`` stay."""
_RUN_IN_SESSION = "SELECT 1 FROM runs WHERE id = ? AND session_id = ?"
_GET_EXECUTION = (
    "SELECT args_digest, state FROM executions WHERE session_id = ? AND run_id = ? AND call_id = ?"
)
_ORDER = " ".join(f"WHEN '{state.value}' THEN {n}" for state, n in STATE_ORDER.items())
_UPSERT_EXECUTION = (
    "INSERT INTO executions (session_id, run_id, call_id, state, args_digest, data) "
    "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (session_id, run_id, call_id) "
    "DO UPDATE SET state = excluded.state, data = excluded.data "
    "WHERE executions.args_digest = excluded.args_digest "
    f"AND (CASE excluded.state {_ORDER} END) >= (CASE executions.state {_ORDER} END)"
)
"""Insert the record, or move the stored one forward: a stored record with other
arguments, or in a later state, is left as it is (no change counted), and
:func:`check_execution` then says why the commit is refused."""
_EXEC_STATE = {s.value: s for s in ExecutionState}


Checked = tuple[Any, ...]
"""A row of :data:`_SESSION_AND_RUN`: what a commit is checked against."""


def checked_run(commit: Commit) -> str | None:
    """The run whose row a commit is checked against (``None``: the session's active
    run, if any)."""
    return commit.lease_run_id if commit.run is None else commit.run.id


def apply(
    conn: sqlite3.Connection, commit: Commit, *, start: bool, known: Checked | None = None
) -> tuple[CommitResult, Checked]:
    """Check and write ``commit``. ``known``: the checked row as it is now, when the caller
    knows it for certain (this connection wrote it last, and nothing was written since:
    see :class:`~plait.adapters.stores.sqlite.store.SqliteStore`); else it is read.
    Returns the result and the checked row as this commit leaves it."""
    sid = commit.session_id
    run = commit.run
    # Under BEGIN IMMEDIATE this connection holds the write lock: check, then write.
    rid = checked_run(commit)
    if start:  # the run is new: the session's row is all there is to check
        row = _start_row(conn, sid)
    elif known is not None:
        row = known
    else:
        row = conn.execute(_SESSION_AND_RUN, (rid, sid)).fetchone()
    if row is None or (commit.session_owner is not None and row[6] != commit.session_owner):
        raise session_not_found(sid)  # someone else's: as if it did not exist
    (
        current,
        active,
        run_session,
        owner,
        expires_at,
        cancel_flag,
        session_owner,
        token,
        status,
        row_run,
        started_at,
        branch,
    ) = row
    ended = status is not None and RunStatus(status).terminal
    expected = current if commit.expected_version is None else commit.expected_version
    cancel = False
    if start:
        assert run is not None
        if active is not None:
            raise session_busy(sid, active)
        if current != expected:
            raise version_conflict(sid, expected, current)
        lease = run.lease
        inserted = conn.execute(
            _INSERT_RUN,
            (
                run.id,
                sid,
                run.status.value,
                run.started_at,
                None if lease is None else lease.owner,
                None if lease is None else lease.expires_at,
                run_data(run),
                run.lease_token,
            ),
        ).rowcount
        if inserted != 1:
            raise duplicate_run(run.id)
        if not run.status.terminal:
            conn.execute(_SET_ACTIVE, (run.id, sid, None))
            active = run.id
        run_session, row_run, cancel_flag, token = sid, run.id, 0, run.lease_token
        owner = None if lease is None else lease.owner
        expires_at = None if lease is None else lease.expires_at
        status, started_at = run.status.value, run.started_at
    else:
        # Fencing before the version: a writer whose lease was taken over is told so,
        # also when the new holder's messages have put its version behind.
        lease = None
        if run is not None:
            if run_session != sid:  # no such run, or another session's
                raise run_not_found(run.id)
            lease = resolve_lease(
                run.id,
                owner,
                expires_at,
                run,
                commit.lease_owner,
                stored_token=token,
                ended=ended,
                lease_token=commit.lease_token,
            )
        elif rid is not None:  # a run's write without its state: fenced all the same
            held = None if run_session != sid else token
            check_token(rid, held, commit.lease_token, ended=ended, wanted=commit.lease_owner)
        if current != expected:
            raise version_conflict(sid, expected, current)
        if run is not None:
            cancel = bool(cancel_flag)
            lease_owner = None if lease is None else lease.owner
            lease_expires_at = None if lease is None else lease.expires_at
            if run.started_at != started_at:
                conn.execute(
                    _UPDATE_RUN,
                    (
                        run.status.value,
                        run.started_at,
                        lease_owner,
                        lease_expires_at,
                        run_data(run),
                        run.id,
                    ),
                )
            elif run.status != status:
                conn.execute(
                    _UPDATE_RUN_STATUS,
                    (run.status.value, lease_owner, lease_expires_at, run_data(run), run.id),
                )
            else:
                conn.execute(
                    _UPDATE_RUN_STATE, (lease_owner, lease_expires_at, run_data(run), run.id)
                )
            if run.status.terminal and active == run.id:
                conn.execute(_SET_ACTIVE, (None, sid, run.id))
                active = None
            owner, expires_at = lease_owner, lease_expires_at
            status, started_at = str(run.status), run.started_at  # its value, no property
        elif run_session is not None:
            cancel = bool(cancel_flag)  # the active run's (or the fenced one's)
    if commit.executions:
        # The run read above is in this session: its records need no other check of it.
        in_session = None if run_session != sid else row_run
        _put_executions(conn, commit, run, in_session)
    if commit.messages:
        _put_messages(conn, sid, expected, commit.messages, branch=bool(branch))
    version = expected + len(commit.messages)
    after = (
        version,
        active,
        run_session,
        owner,
        expires_at,
        cancel_flag,
        session_owner,
        token,
        status,
        row_run,
        started_at,
        branch,
    )
    return CommitResult(version, cancel), after


def _start_row(conn: sqlite3.Connection, sid: str) -> Checked | None:
    """The checked row of a run's start, from the session's row alone (the statement
    ``get_session`` runs: a process starting its first run compiles one statement fewer).
    A session with a parent may be a branch: its new messages are checked against the
    prefix it refers to, if any."""
    session = conn.execute(GET_SESSION, (sid,)).fetchone()
    if session is None:
        return None
    _id, _at, owner, _workspace, version, active, parent, *_rest = session
    return (version, active, None, None, None, None, owner, None, None, None, None, parent)


def _put_executions(
    conn: sqlite3.Connection, commit: Commit, run: Run | None, known: str | None
) -> None:
    """Insert the records or move them forward, in one statement; one that cannot move
    (other arguments, an earlier state) changes nothing, and is then found and refused.
    A new record's run must be in the session: the run read with the session (``known``)
    or the commit's (inserted or checked above) is; another one is looked up."""
    sid = commit.session_id
    records = commit.executions
    for rec in records:
        if rec.run_id == known or (run is not None and run.id == rec.run_id):
            continue
        row = conn.execute(_GET_EXECUTION, (sid, rec.run_id, rec.call_id)).fetchone()
        if row is None and conn.execute(_RUN_IN_SESSION, (rec.run_id, sid)).fetchone() is None:
            raise run_not_found(rec.run_id)
    changed = conn.executemany(_UPSERT_EXECUTION, [execution_row(e) for e in records]).rowcount
    if changed == len(records):
        return
    for rec in records:  # one stayed as it was: say which, and why
        row = conn.execute(_GET_EXECUTION, (sid, rec.run_id, rec.call_id)).fetchone()
        check_execution(row[0], _EXEC_STATE[row[1]], rec)
    raise StoreError(f"an execution record of session {sid!r} was not written", session_id=sid)


def _put_messages(
    conn: sqlite3.Connection,
    sid: str,
    expected: int,
    messages: tuple[Message, ...],
    *,
    branch: bool,
) -> None:
    if branch:  # ids are unique across the prefix it refers to as well
        parts = segments.segments(conn, sid)
        for message in messages:
            if segments.ancestor_seq_of(conn, sid, message.id, parts) is not None:
                raise duplicate_message(sid, message.id)
    members = []
    for seq, message in enumerate(messages, expected + 1):
        pk = conn.execute(_INSERT_MESSAGE, message_row(message)).lastrowid
        members.append((sid, seq, message.id, pk))
    try:
        conn.executemany(_INSERT_MEMBER, members)
    except sqlite3.IntegrityError:
        seen: set[str] = set()
        for message in messages:
            if message.id in seen or conn.execute(_IS_MEMBER, (sid, message.id)).fetchone():
                raise duplicate_message(sid, message.id) from None
            seen.add(message.id)
        raise
