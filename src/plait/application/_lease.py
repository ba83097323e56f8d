"""The lease heartbeat of a run being driven
(docs/design.md#recovery-without-repeating-side-effects, issue 6 item 3).

A run holds a lease of ``lease_seconds`` (configurable: ``AgentService.build(lease_seconds=...)``
/ ``Runtime(lease_seconds=...)``, default 60 s). While the run is driven, a separate task
renews it every third of that, whatever the model or a tool is doing: the store's I/O runs
off the event loop and tools run in threads or subprocesses, so the heartbeat is never
starved by them. Recovery by another process can take a run over only after its lease
has expired, i.e. after its process stopped renewing for a whole lease.

Each step's commit extends the lease too. A beat that finds the lease extended by a
commit since the previous beat, less than half a period ago by the lease's own clock,
writes nothing: the renewal would set about what the commit set. A run whose steps
commit at least that often (every 10 s at the default lease) is kept by its commits
alone, one durable write fewer per beat; the next renewal comes with half the lease left
at least, so two beats still fall before its end, as without the skip. Such a beat reads
the run's lease token instead (a read, not a durable write), so a takeover by force
(``plait runs recover --force``, which does not wait for the lease to expire) is noticed
at the first beat after it whether or not a step committed in between.

If a renewal finds the lease taken (another process recovered the run), the run is marked
``lease_lost``: a running model call or stoppable tool is interrupted, and the run's next
commit stops it with a clear :class:`~plait.domain.errors.LeaseLostError` before writing
anything. A renewal that fails for another reason (a busy store) is retried at the next
beat; the lease stays valid meanwhile as long as one beat in three succeeds.
"""

from __future__ import annotations

import asyncio
import logging

from plait.application._journal import RunJournal
from plait.application._run_state import ActiveRun
from plait.application.ports import SessionStore
from plait.domain.errors import LeaseLostError, PlaitError

__all__ = ["LeaseKeeper"]

log = logging.getLogger("plait.agent")


class LeaseKeeper:
    def __init__(self, store: SessionStore, journal: RunJournal, lease_seconds: float) -> None:
        self.store = store
        self.journal = journal
        self.lease_seconds = lease_seconds

    async def keep(self, active: ActiveRun) -> None:
        """Renew the run's lease until cancelled (the driver cancels it when the run stops)."""
        period = self.lease_seconds / 3
        fresh = self.lease_seconds - period / 2
        clock = self.journal.clock
        seen = _expiry(active)
        while True:
            await asyncio.sleep(period)
            expiry, seen = seen, _expiry(active)
            # extended by a step's commit since the last beat, moments ago: only checked
            checking = seen is not None and seen != expiry and seen - clock.now() > fresh
            try:
                if checking:
                    await self._check_token(active)
                    continue
                await self.store.renew_lease(
                    active.run.id,
                    owner=self.journal.owner,
                    expires_at=clock.now() + self.lease_seconds,
                    lease_token=active.run.lease_token,
                )
            except LeaseLostError:
                # Told once, by whoever stops the run (the worker's warning, the CLI's error).
                log.info("run %s: lease lost; the run stops at its next commit", active.run.id)
                active.lease_lost = True
                if active.task is not None and active.interruptible:
                    active.task.cancel()
                return
            except PlaitError as exc:
                what = "check" if checking else "renewal"
                log.warning(
                    "run %s: lease %s failed (%s); retrying", active.run.id, what, exc.message
                )

    async def _check_token(self, active: ActiveRun) -> None:
        """LeaseLostError if the run was claimed since this process's claim (its token
        moved on): what a renewal would have found, without writing."""
        run = active.run
        stored = await self.store.get_run(run.id)
        if stored.lease_token != run.lease_token:
            holder = stored.lease.owner if stored.lease is not None else "nobody"
            raise LeaseLostError(
                f"run {run.id} was claimed by {holder} (lease token {stored.lease_token}, "
                f"this process holds {run.lease_token})"
            )


def _expiry(active: ActiveRun) -> float | None:
    """The expiry of the run's lease as its last durable commit wrote it (the driver
    keeps the committed state in ``active.run``; this heartbeat's own renewals are not
    in it)."""
    lease = active.run.lease
    return None if lease is None else lease.expires_at
