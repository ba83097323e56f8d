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


def test_a_run_another_process_continued_first_is_left_to_it() -> None:
    rig = Rig(APPROVE_EDITS, script(edit("c1", DEPLOY_EDIT), {"text": "done"}))
    rig.session()
    run = rig.send("edit").run
    (pending,) = asyncio.run(rig.store.list_approvals())
    desk = ApprovalDesk(approvals=rig.store, service=rig.service)
    real_resume = rig.service.resume

    async def raced(run_id: str, **kw: object) -> object:
        # another desk requeued the run between this one's decision and its resume
        await desk.requeue_if_ready(run_id)
        return await real_resume(run_id)

    rig.service.resume = raced  # type: ignore[method-assign,assignment]
    done = asyncio.run(
        desk.decide_and_continue(pending.id, approve=True, grantor="ana", ttl_seconds=60)
    )
    assert (done.result, done.run.status, done.waiting_for) == (None, RunStatus.QUEUED, ())
    assert done.approval.grantor == "ana" and rig.editor.calls == []
    assert done.run.id == run.id


def test_a_refused_resume_that_was_no_race_is_raised() -> None:
    rig = Rig(APPROVE_EDITS, script(edit("c1", DEPLOY_EDIT), {"text": "done"}))
    rig.session()
    rig.send("edit")
    (pending,) = asyncio.run(rig.store.list_approvals())
    desk = ApprovalDesk(approvals=rig.store, service=rig.service)

    async def refused(run_id: str, **kw: object) -> object:
        raise RunStateError("refused for another reason", run_id=run_id)

    rig.service.resume = refused  # type: ignore[method-assign,assignment]
    with pytest.raises(RunStateError, match="another reason"):
        asyncio.run(
            desk.decide_and_continue(pending.id, approve=True, grantor="ana", ttl_seconds=60)
        )
