"""Ports of the writes the application hands a store: one atomic :class:`Commit` (a step's
messages, the run's state, its execution records) and one :class:`ForkCommit` (a new
branch of a session). What a store is and what it answers are in :mod:`.stores`."""

from __future__ import annotations

from typing import TYPE_CHECKING

from plait.domain.record import record

if TYPE_CHECKING:
    from plait.domain.forks import ForkRecord
    from plait.domain.messages import Message
    from plait.domain.runs import Run
    from plait.domain.session import ExecutionRecord, Session

__all__ = ["Commit", "ForkCommit"]


@record(kw_only=True)
class Commit:
    """One atomic write: messages appended at ``expected_version + 1 ...``, the run's new
    state and execution records, all or nothing. ``expected_version=None`` (``start_run``
    only; the busy check still applies): append after the session's last message.

    ``lease_owner`` fences the write: if the stored run is leased to someone else the
    commit fails with :class:`~plait.domain.errors.LeaseLostError`. ``lease_token`` (the
    :attr:`~plait.domain.runs.Run.lease_token` the writer's claim returned) fences it for
    real: if the run (``run``, else ``lease_run_id``) has been claimed since, or has
    ended, the commit fails the same way and nothing of it is written, also when the run
    holds no lease now (a process that took it over released it). ``session_owner``: the
    session must be this owner's, else :class:`~plait.domain.errors.SessionNotFoundError`
    as if it did not exist. A terminal run status releases the session.
    """

    session_id: str
    expected_version: int | None
    messages: tuple[Message, ...] = ()
    run: Run | None = None
    executions: tuple[ExecutionRecord, ...] = ()
    lease_owner: str | None = None
    session_owner: str | None = None
    lease_token: int | None = None
    lease_run_id: str | None = None
    """The run ``lease_token`` belongs to, for a commit that writes no run (a tool result):
    ``run.id`` otherwise."""


@record(kw_only=True)
class ForkCommit:
    """One atomic fork: create ``branch`` (empty, idle, with its fork origin), give it the
    source's messages ``1..record.through_seq`` (shared by id, bodies not copied where the
    store can share them) and store ``record``, all or nothing."""

    branch: Session
    record: ForkRecord
