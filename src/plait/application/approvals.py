"""A person's decision about a waiting call, and what happens to its run next: one
mechanism for every surface.

:class:`ApprovalDesk` records the decision (:class:`~plait.application.governance.
approvals.Approvals`) and, once none of the run's requests is pending, the run goes on
from the waiting call exactly as ``plait runs resume`` would (the gate is asked again: an
approval lets the call run, a denial settles it as ``denied`` and the model reads why).
Who drives it on is the only choice:

- :meth:`ApprovalDesk.decide` (service mode, the HTTP API): the run goes back to the
  queue and a worker (any process) continues it;
- :meth:`ApprovalDesk.decide_and_continue` (the embedded CLI, no worker): this process
  continues it at once, to its end or its next wait.
"""

from __future__ import annotations

from dataclasses import replace

from plait.application._queued import check_can_queue
from plait.application._run_state import RunResult
from plait.application.events import RunObserver
from plait.application.ports import ApprovalStore, TextSink
from plait.application.service import AgentService
from plait.domain.errors import LeaseLostError, RunStateError
from plait.domain.governance import Approval, ApprovalStatus
from plait.domain.record import record
from plait.domain.runs import Run, RunStatus

__all__ = ["ApprovalDesk", "Decided"]


@record
class Decided:
    """What :meth:`ApprovalDesk.decide_and_continue` did."""

    approval: Approval
    """The decided request."""
    run: Run
    """The run now: where continuing it left it, else as it was."""
    result: RunResult | None
    """What continuing the run added (``None``: it was not continued here, see
    :attr:`waiting_for` and :attr:`run`)."""
    waiting_for: tuple[Approval, ...]
    """The run's requests still pending: the ones it waited for besides this one (it was
    not continued), or the ones continuing it led to (it waits again)."""


class ApprovalDesk:
    """Records a person's decision and continues the run once nothing else is pending."""

    def __init__(self, *, approvals: ApprovalStore, service: AgentService) -> None:
        self.approvals = approvals
        self.service = service
        self._decisions = service.approvals  # the same store: the service's

    async def decide(
        self,
        approval_id: str,
        *,
        approve: bool,
        grantor: str,
        ttl_seconds: float | None = None,
        reason: str | None = None,
    ) -> Approval:
        """Record the decision; a run left with nothing pending goes back to the queue
        for a worker. Needs no model. Refused (ConfigError, nothing written) on a store
        no worker can serve: use :meth:`decide_and_continue` there."""
        check_can_queue(self.service.store, "cannot queue the run after this decision")
        decided = await self._decisions.decide(
            approval_id, approve=approve, grantor=grantor, ttl_seconds=ttl_seconds, reason=reason
        )
        await self.requeue_if_ready(decided.run_id)
        return decided

    async def decide_and_continue(
        self,
        approval_id: str,
        *,
        approve: bool,
        grantor: str,
        ttl_seconds: float | None = None,
        reason: str | None = None,
        observer: RunObserver | None = None,
        on_text: TextSink | None = None,
    ) -> Decided:
        """Record the decision and, when the run waits for nothing else, drive it on
        here (:meth:`AgentService.resume`). A run that cannot be continued by this process
        (no model can be opened for it) is refused with a ConfigError before anything is
        written. Another process that took the run over first keeps it."""
        request = await self._decisions.store().get_approval(approval_id)
        run = await self.service.store.get_run(request.run_id)
        if run.status is RunStatus.AWAITING_APPROVAL:
            self.service.models.check_can_run()
            self.service.models.caller_for(run)  # the run's own model must open here
        decided = await self._decisions.decide(
            approval_id, approve=approve, grantor=grantor, ttl_seconds=ttl_seconds, reason=reason
        )
        ready, pending = await self._ready(decided.run_id)
        if ready is None:
            now = await self.service.store.get_run(decided.run_id)
            return Decided(decided, now, None, pending)
        try:
            result = await self.service.resume(ready.id, observer=observer, on_text=on_text)
        except (LeaseLostError, RunStateError):
            now = await self.service.store.get_run(ready.id)
            if now.status is RunStatus.AWAITING_APPROVAL:
                raise  # not a race: nobody else moved it
            return Decided(decided, now, None, ())  # another process continued it first
        _, after = await self._ready(ready.id)
        return Decided(decided, result.run, result, after)

    async def requeue_if_ready(self, run_id: str) -> bool:
        """Put a run ``awaiting_approval`` back in the queue when none of its approval
        requests is pending any more. Returns whether it did. Another process that
        resumed or requeued the run first wins (its lease fences this one out)."""
        run, _ = await self._ready(run_id)
        if run is None:
            return False
        driver = self.service.driver
        try:
            active = await driver.take_over(run, observer=None)
        except LeaseLostError:
            return False  # someone else holds it now
        if active.run.status is RunStatus.AWAITING_APPROVAL:
            queued = replace(active.run, status=RunStatus.QUEUED, error=None, lease=None)
        else:  # it moved on between our read and our claim: just let go of it
            queued = replace(active.run, lease=None)
        await driver.journal.commit(active, (), run=queued)
        return queued.status is RunStatus.QUEUED

    async def pending(self, run: Run) -> tuple[Approval, ...]:
        """The run's requests that still wait for a decision, oldest first."""
        found = await self.approvals.list_approvals(session_id=run.session_id, run_id=run.id)
        waiting = (a for a in found if a.status is ApprovalStatus.PENDING)
        return tuple(sorted(waiting, key=lambda approval: approval.requested_at))

    async def _ready(self, run_id: str) -> tuple[Run | None, tuple[Approval, ...]]:
        """The run if it awaits approval and none of its requests is pending (else None),
        and its pending requests."""
        run = await self.service.store.get_run(run_id)
        pending = await self.pending(run)
        if run.status is not RunStatus.AWAITING_APPROVAL or pending:
            return None, pending
        return run, pending
