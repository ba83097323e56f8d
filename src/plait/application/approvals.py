"""Deciding approvals in service mode: the decision is recorded, and a run that waited
only for it goes back to the queue, where a worker continues it exactly as ``plait runs
resume`` would (the gate is asked again about the waiting call: an approval lets it run,
a denial settles it as ``denied`` and the model reads why)."""

from __future__ import annotations

from dataclasses import replace

from plait.application.ports import ApprovalStore
from plait.application.service import AgentService
from plait.domain.errors import LeaseLostError
from plait.domain.governance import Approval, ApprovalStatus
from plait.domain.runs import RunStatus

__all__ = ["ApprovalDesk"]


class ApprovalDesk:
    """Records a person's decision and requeues the run once nothing else is pending.

    Needs no model: a worker (any process) picks the requeued run up."""

    def __init__(self, *, approvals: ApprovalStore, service: AgentService) -> None:
        self.approvals = approvals
        self.service = service

    async def decide(
        self,
        approval_id: str,
        *,
        approve: bool,
        grantor: str,
        ttl_seconds: float | None = None,
        reason: str | None = None,
    ) -> Approval:
        decided = await self.approvals.decide_approval(
            approval_id, approve=approve, grantor=grantor, at=self.service.clock.now(),
            ttl_seconds=ttl_seconds, reason=reason,
        )  # fmt: skip
        await self.requeue_if_ready(decided.run_id)
        return decided

    async def requeue_if_ready(self, run_id: str) -> bool:
        """Put a run ``awaiting_approval`` back in the queue when none of its approval
        requests is pending any more. Returns whether it did. Another process that
        resumed or requeued the run first wins (its lease fences this one out)."""
        store = self.service.store
        run = await store.get_run(run_id)
        if run.status is not RunStatus.AWAITING_APPROVAL:
            return False
        waiting = await self.approvals.list_approvals(session_id=run.session_id, run_id=run_id)
        if any(a.status is ApprovalStatus.PENDING for a in waiting):
            return False
        driver = self.service.driver
        try:
            a = await driver.take_over(run, observer=None)
        except LeaseLostError:
            return False  # someone else holds it now
        if a.run.status is RunStatus.AWAITING_APPROVAL:
            queued = replace(a.run, status=RunStatus.QUEUED, error=None, lease=None)
        else:  # it moved on between our read and our claim: just let go of it
            queued = replace(a.run, lease=None)
        await driver.journal.commit(a, (), run=queued)
        return queued.status is RunStatus.QUEUED
