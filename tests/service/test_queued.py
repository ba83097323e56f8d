"""A queued run in service mode: submitted in one store call (no read of the session
first), taken in hand by the worker whose queue claim leased it without claiming it a
second time."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from plait.adapters.stores.memory.store import MemoryStore
from plait.adapters.system import RandomIds, SystemClock
from plait.application.ports import ModelRequest, ModelResponse
from plait.application.service import AgentService
from plait.domain.errors import LeaseLostError, SessionBusyError, SessionNotFoundError
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

    return AgentService.build(
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


def test_submit_is_one_store_call_with_the_owner_rule() -> None:
    async def go() -> None:
        store = CountingStore()
        svc = service(store)
        s = await svc.create_session(owner="alice")
        before = store.session_reads
        run = await svc.submit(s.id, "go", owner="alice")
        assert store.session_reads == before and run.status is RunStatus.QUEUED
        assert [m.seq for m in await store.read_messages(s.id)] == [1]
        assert await store.get_run(run.id) == run
        # Someone else's session: as if it did not exist, nothing written.
        other = await svc.create_session(owner="bob")
        with pytest.raises(SessionNotFoundError) as info:
            await svc.submit(other.id, "go", owner="alice")
        assert info.value.details == {"session_id": other.id}
        assert await store.list_runs(session_id=other.id) == []
        assert (await store.get_session(other.id)).version == 0
        with pytest.raises(SessionNotFoundError):
            await svc.submit("no-such-session", "go", owner="alice")
        # No owner rule (an admin): anyone's session; a busy one is still refused.
        assert (await svc.submit(other.id, "go")).session_id == other.id
        with pytest.raises(SessionBusyError):
            await svc.submit(other.id, "again")
        assert (await store.get_session(other.id)).version == 1

    asyncio.run(go())
