"""ApprovalDesk: a decision requeues a run awaiting approval only once none of its
requests is pending; a worker's ``execute`` then continues it like ``resume``."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import pytest

from plait.application.approvals import ApprovalDesk
from plait.domain.errors import RunStateError
from plait.domain.runs import RunStatus
from tests.governance.test_runs import APPROVE_EDITS, DEPLOY_EDIT, Rig, edit, script


def test_the_run_is_queued_after_the_last_pending_decision_and_then_continues() -> None:
    rig = Rig(APPROVE_EDITS, script(edit("c1", DEPLOY_EDIT), {"text": "done"}))
    rig.session()
    run = rig.send("edit").run
    assert run.status is RunStatus.AWAITING_APPROVAL
    (first,) = asyncio.run(rig.store.list_approvals())
    # A second request of the same run still pending (say, an older one): the run waits.
    other = replace(first, id="apr_other", call_id="c0")
    asyncio.run(rig.store.request_approval(other))
    desk = ApprovalDesk(approvals=rig.store, service=rig.service)
    asyncio.run(desk.decide(first.id, approve=True, grantor="ana", ttl_seconds=600))
    assert asyncio.run(rig.store.get_run(run.id)).status is RunStatus.AWAITING_APPROVAL
    asyncio.run(desk.decide(other.id, approve=False, grantor="ana", reason="stale"))
    queued = asyncio.run(rig.store.get_run(run.id))
    assert queued.status is RunStatus.QUEUED and queued.lease is None
    session = asyncio.run(rig.store.get_session("s1"))
    assert session.active_run_id == run.id  # still claimed: nobody else can start a run
    # A worker claims it and drives it on from the waiting call.
    claimed = asyncio.run(
        rig.store.claim_queued_run(owner="w1", now=rig.clock.now(), expires_at=1e12)
    )
    assert claimed is not None and claimed.id == run.id
    rig.service.owner = "w1"
    done = asyncio.run(rig.service.execute(claimed))
    assert done.run.status is RunStatus.COMPLETED
    assert [c.arguments() for c in rig.editor.calls] == [DEPLOY_EDIT]
    # Nothing more to do for the desk now, and a decided request cannot be decided again.
    assert asyncio.run(desk.requeue_if_ready(run.id)) is False
    with pytest.raises(RunStateError):
        asyncio.run(desk.decide(first.id, approve=True, grantor="ana", ttl_seconds=60))


def test_a_decision_about_a_run_that_no_longer_waits_only_records_it() -> None:
    rig = Rig(APPROVE_EDITS, script(edit("c1", DEPLOY_EDIT)))
    rig.session()
    run = rig.send("edit").run
    (pending,) = asyncio.run(rig.store.list_approvals())
    asyncio.run(rig.service.cancel(run.id))
    desk = ApprovalDesk(approvals=rig.store, service=rig.service)
    decided = asyncio.run(desk.decide(pending.id, approve=True, grantor="ana", ttl_seconds=60))
    assert decided.grantor == "ana"
    assert asyncio.run(rig.store.get_run(run.id)).status is RunStatus.CANCELLED
