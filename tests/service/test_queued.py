"""A queued run in service mode: submitted with the session the caller read, taken in
hand by the worker whose queue claim leased it without claiming it a second time."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from plait.adapters.stores.memory import MemoryStore
from plait.adapters.system import RandomIds, SystemClock
from plait.application.ports import ModelRequest, ModelResponse
from plait.application.service import AgentService
from plait.domain.errors import ConflictError, LeaseLostError
from plait.domain.runs import RunStatus
from plait.testing import FunctionModel


class CountingStore(MemoryStore):
    """Counts the claims and session reads the service makes."""

    def __init__(self) -> None:
        super().__init__()
        self.claims = 0
        self.session_reads = 0

    async def claim_run(self, run_id: str, **kw: Any) -> Any:
        self.claims += 1
        return await super().claim_run(run_id, **kw)

    async def get_session(self, session_id: str) -> Any:
        self.session_reads += 1
        return await super().get_session(session_id)


def service(store: MemoryStore, owner: str = "w1", lease: float = 30.0) -> AgentService:
    def answer(request: ModelRequest) -> ModelResponse:
        return ModelResponse(text="done")

    return AgentService(
        store=store, artifacts=store, model=FunctionModel(answer, name="m"),
        clock=SystemClock(), ids=RandomIds(), owner=owner, lease_seconds=lease,
    )  # fmt: skip


def test_a_run_the_queue_leased_to_us_is_not_claimed_again() -> None:
    async def go() -> None:
        store = CountingStore()
        svc = service(store)
        s = await svc.create_session()
        queued = await svc.submit(s.id, "go")
        now = svc.clock.now()
        run = await store.claim_queued_run(owner="w1", now=now, expires_at=now + 30)
        assert run is not None and run.id == queued.id
        result = await svc.execute(run)
        assert result.run.status is RunStatus.COMPLETED
        assert store.claims == 0
        assert [m.message.kind for m in await store.read_messages(s.id)] == ["user", "assistant"]

    asyncio.run(go())


def test_a_run_whose_lease_expired_or_is_not_ours_is_claimed() -> None:
    async def go() -> None:
        store = CountingStore()
        svc = service(store)
        s = await svc.create_session()
        await svc.submit(s.id, "go")
        now = svc.clock.now()
        # The queue's claim expired before the worker got to it: claimed like any run.
        run = await store.claim_queued_run(owner="w1", now=now, expires_at=now - 1)
        assert run is not None
        result = await svc.execute(run)
        assert result.run.status is RunStatus.COMPLETED and store.claims == 1

        # Another worker holds a live lease: the claim fails and nothing is written.
        s2 = await svc.create_session()
        await svc.submit(s2.id, "go")
        theirs = await store.claim_queued_run(owner="w2", now=now, expires_at=now + 30)
        assert theirs is not None
        with pytest.raises(LeaseLostError):
            await svc.execute(theirs)
        assert (await store.get_run(theirs.id)).status is RunStatus.QUEUED
        assert (await store.get_session(s2.id)).version == 1

    asyncio.run(go())


def test_submit_uses_the_session_the_caller_read_and_still_checks_its_version() -> None:
    async def go() -> None:
        store = CountingStore()
        svc = service(store)
        s = await svc.create_session()
        read = await store.get_session(s.id)
        before = store.session_reads
        run = await svc.submit(s.id, "go", read=read)
        assert store.session_reads == before and run.status is RunStatus.QUEUED
        # A session read before another write: the commit's version check refuses it.
        s2 = await svc.create_session()
        stale = await store.get_session(s2.id)
        await svc.submit(s2.id, "first")
        with pytest.raises(ConflictError):
            await svc.submit(s2.id, "second", read=stale)
        # A session of another id is not used: the right one is read.
        s3 = await svc.create_session()
        assert (await svc.submit(s3.id, "go", read=read)).session_id == s3.id

    asyncio.run(go())
