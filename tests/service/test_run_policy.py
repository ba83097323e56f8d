"""The tool policy a run's calls are decided under is recorded on the run: the policy of
the process that started it, then that of whichever process continues it after an
approval (``approvals approve`` continuing here, or a worker taking the requeued run),
which is the one that decides its calls from then on."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import pytest

from plait.adapters.stores.postgres.store import PostgresStore
from plait.application.approvals import ApprovalDesk
from plait.application.ports import ModelRequest, ModelResponse
from plait.domain.runs import RunStatus
from plait.testing import ScriptedModel
from tests.governance.test_runs import APPROVE_EDITS, DEPLOY_EDIT, Rig, edit, script
from tests.pg import empty_database

POLICY_A = replace(APPROVE_EDITS, source="/etc/plait/a.yaml")
POLICY_B = replace(APPROVE_EDITS, source="/etc/plait/b.yaml")


def _waiting(store: object = None) -> tuple[Rig, str]:
    """A run started under policy A, waiting for approval of its edit."""
    rig = Rig(POLICY_A, script(edit("c1", DEPLOY_EDIT), {"text": "done"}), store=store)
    rig.session()
    run = rig.send("edit").run
    assert run.status is RunStatus.AWAITING_APPROVAL
    assert asyncio.run(rig.store.get_run(run.id)).policy == "/etc/plait/a.yaml"
    return rig, run.id


def test_approve_and_continue_records_the_continuing_policy() -> None:
    a, run_id = _waiting()
    b = Rig(POLICY_B, script(edit("c1", DEPLOY_EDIT), {"text": "done"}), store=a.store, tag="b")
    (pending,) = asyncio.run(a.store.list_approvals())
    desk = ApprovalDesk(approvals=b.store, service=b.service)
    done = asyncio.run(
        desk.decide_and_continue(pending.id, approve=True, grantor="ana", ttl_seconds=60)
    )
    assert done.run.status is RunStatus.COMPLETED and done.run.policy == "/etc/plait/b.yaml"
    assert asyncio.run(a.store.get_run(run_id)).policy == "/etc/plait/b.yaml"
    assert [c.arguments() for c in b.editor.calls] == [DEPLOY_EDIT]


def test_a_worker_continuing_a_requeued_run_records_its_policy() -> None:
    a, run_id = _waiting()
    (pending,) = asyncio.run(a.store.list_approvals())
    desk = ApprovalDesk(approvals=a.store, service=a.service)
    asyncio.run(desk.decide(pending.id, approve=True, grantor="ana", ttl_seconds=60))
    assert asyncio.run(a.store.get_run(run_id)).status is RunStatus.QUEUED
    b = Rig(POLICY_B, script(edit("c1", DEPLOY_EDIT), {"text": "done"}), store=a.store, tag="b")
    claimed = asyncio.run(a.store.claim_queued_run(owner="w", now=a.clock.now(), expires_at=1e12))
    assert claimed is not None and claimed.id == run_id
    b.service.owner = "w"
    done = asyncio.run(b.service.execute(claimed))
    assert done.run.status is RunStatus.COMPLETED
    assert asyncio.run(a.store.get_run(run_id)).policy == "/etc/plait/b.yaml"


@pytest.mark.slow
def test_a_postgres_worker_s_starting_claim_records_its_policy(pg_url: str) -> None:
    empty_database(pg_url)

    async def claim(store: PostgresStore, now: float) -> object:
        try:
            return await store.claim_and_start_run(
                owner="w", now=now, expires_at=now + 600, model="m", model_spec=None
            )
        finally:
            await store.close()

    a, run_id = _waiting(PostgresStore(pg_url))
    (pending,) = asyncio.run(a.store.list_approvals())
    desk = ApprovalDesk(approvals=a.store, service=a.service)
    asyncio.run(desk.decide(pending.id, approve=True, grantor="ana", ttl_seconds=60))
    claimed = asyncio.run(claim(PostgresStore(pg_url), a.clock.now()))
    b = Rig(
        POLICY_B,
        script(edit("c1", DEPLOY_EDIT), {"text": "done"}),
        store=PostgresStore(pg_url),
        tag="b",
    )
    b.service.owner = "w"
    done = asyncio.run(b.service.execute(claimed))  # type: ignore[arg-type]
    assert done.run.status is RunStatus.COMPLETED
    assert asyncio.run(b.store.get_run(run_id)).policy == "/etc/plait/b.yaml"


def test_an_ungoverned_run_records_no_policy() -> None:
    from plait.adapters.stores.memory.store import MemoryStore
    from plait.application.service import AgentService
    from plait.testing import FixedClock, SequentialIds

    store = MemoryStore()
    svc = AgentService.build(
        store=store, artifacts=store, model=script({"text": "hi"}), clock=FixedClock(),
        ids=SequentialIds(),
    )  # fmt: skip
    session = asyncio.run(svc.create_session())
    assert asyncio.run(svc.send(session.id, "hello")).run.policy is None


class _Died(BaseException):
    """The process running the model died (nothing below catches it)."""


class _DiesOnSecondTurn(ScriptedModel):
    async def complete(self, request: ModelRequest) -> ModelResponse:
        if request.role == "assistant" and len(self.requests) >= 1:
            raise _Died
        return await super().complete(request)


def test_a_recovered_run_records_the_recovering_policy() -> None:
    turns = ({"tool_calls": [{"name": "read_file", "arguments": {"path": "a"}, "id": "c1"}]},)
    a = Rig(POLICY_A, _DiesOnSecondTurn({"version": 1, "assistant": [*turns, {"text": "done"}]}))
    a.session()
    with pytest.raises(_Died):
        a.send("read it")
    (run,) = asyncio.run(a.store.list_runs())
    assert run.status is RunStatus.RUNNING and run.policy == "/etc/plait/a.yaml"
    b = Rig(POLICY_B, script(*turns, {"text": "done"}), store=a.store, tag="b")
    b.service.owner = "b"
    (report,) = asyncio.run(b.service.recover(run_id=run.id, force=True))
    assert report.result is not None and report.result.run.status is RunStatus.COMPLETED
    assert asyncio.run(a.store.get_run(run.id)).policy == "/etc/plait/b.yaml"
