"""Port of a run queue that starts the runs it hands out (service mode, docs/design.md#surfaces).

:class:`~plait.application.ports.RunQueue.claim_queued_run` only leases a queued run; the
worker then reads the session and its history and persists the run as ``running`` (three
more round trips, one of them a durable write). A store that offers
:class:`StartingQueue` does all of it in one durable write: the run it returns is already
``running`` in the store, with the worker's lease, model and deadline recorded, so a
worker that dies right after the claim leaves a run that recovery picks up, as before.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from plait.domain.record import record
from plait.domain.runs import Run
from plait.domain.session import Session, StoredMessage

__all__ = ["ClaimedRun", "StartingQueue", "WorkerPresence"]


@record
class ClaimedRun:
    """A queued run taken and persisted as ``running``, with its session and history as
    they were right after the claim (the session's version is its last message's seq)."""

    run: Run
    session: Session
    history: tuple[StoredMessage, ...]


@runtime_checkable
class StartingQueue(Protocol):
    async def claim_and_start_run(
        self, *, owner: str, now: float, expires_at: float, model: str, model_spec: str | None
    ) -> ClaimedRun | None:
        """Atomically, in one durable write: take the oldest free ``queued`` run (as
        ``claim_queued_run``), set its status to ``running``, its lease to ``owner`` until
        ``expires_at``, its ``model`` and ``model_spec``, and its ``deadline_at`` to
        ``now`` plus its budget's ``deadline_seconds`` (none without one). ``None`` if no
        run is free."""
        ...


@runtime_checkable
class WorkerPresence(Protocol):
    async def hold_presence(self, owner: str) -> None:
        """Announce that ``owner`` lives for as long as this process keeps the store open,
        in a way the store notices at once when the process dies (its connection closes):
        from then on a run leased to ``owner`` counts as stale (``list_stale_runs`` lists
        it, ``claim_run`` takes it over) without waiting for its lease to expire. Safety
        still rests on the lease token: a run taken over from a process that was only cut
        off has its next write refused. Call it before claiming; calling it again for the
        same owner does nothing."""
        ...
