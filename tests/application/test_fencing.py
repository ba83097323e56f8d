"""Fencing (issue 20 item 1), in process: worker A is paused inside a side-effecting
call past its lease, worker B takes the run over and recovers it (the call becomes
``unknown``, the run waits for a person and holds no lease), then A resumes. A's result
must be refused: the run still waits, a person's resolution works and the run
completes. Two services on one store (a handle each, as two processes have), B's clock
past A's lease."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from plait.adapters.stores import Store
from plait.adapters.stores.memory.store import MemoryStore
from plait.adapters.stores.postgres.store import PostgresStore
from plait.adapters.stores.sqlite.store import SqliteStore
from plait.application.ports import ToolInvocation
from plait.application.service import AgentService
from plait.domain.errors import LeaseLostError
from plait.domain.messages import ToolStatus
from plait.domain.runs import RunStatus
from plait.domain.tools import EffectClass
from plait.testing import FixedClock, FunctionModel, RecordingTool, SequentialIds
from tests.application.conftest import Turns, call, reply, shape, spec
from tests.pg import empty_database

LEASE = 60.0
Opener = Callable[[], Store]


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def opener(request: pytest.FixtureRequest, tmp_path: Path) -> Opener:
    """Opens a handle on one store (memory: the same object every time)."""
    if request.param == "memory":
        shared = MemoryStore()
        return lambda: shared
    if request.param == "sqlite":
        return lambda: SqliteStore(tmp_path / "plait.db")
    url = request.getfixturevalue("pg_url")
    empty_database(url)
    return lambda: PostgresStore(url)


def _service(store: Store, owner: str, clock: FixedClock, turns: Turns, tool: Any) -> AgentService:
    return AgentService.build(
        store=store, artifacts=store, model=FunctionModel(turns, name="fn"), tools=[tool.tool],
        clock=clock, ids=SequentialIds(prefix_tag=owner[-1]), owner=owner, lease_seconds=LEASE,
    )  # fmt: skip


@pytest.mark.slow
def test_a_paused_worker_that_lost_its_run_writes_no_result_after_the_take_over(
    opener: Opener, caplog: pytest.LogCaptureFixture
) -> None:
    """The SIGSTOP attack: without fencing A's late ``succeeded`` settled the call the
    recovery had made ``unknown``, and ``resolve`` answered "unresolved calls: none"."""

    async def go() -> None:
        store_a, store_b = opener(), opener()
        clock_a = FixedClock()
        clock_b = FixedClock(clock_a.now() + 10 * LEASE)  # A's lease has long expired
        entered, resume = asyncio.Event(), asyncio.Event()
        effects: list[str] = []

        async def deploy(inv: ToolInvocation) -> str:
            effects.append(inv.call.id)
            entered.set()
            await resume.wait()  # A is stopped here (SIGSTOP), its heartbeat too
            return "deployed"

        tool = RecordingTool(spec("deploy", EffectClass.SIDE_EFFECT), fn=deploy)
        turns_a = Turns([reply("", call("deploy", {"text": "x"}, "c1")), reply("all done")])
        a = _service(store_a, "worker-a", clock_a, turns_a, tool)
        b = _service(store_b, "worker-b", clock_b, Turns([reply("done")]), tool)
        session = await a.create_session()
        sending = asyncio.create_task(a.send(session.id, "deploy it"))
        await entered.wait()
        (stuck,) = await store_b.list_stale_runs(now=clock_b.now())
        (report,) = await b.recover(run_id=stuck.id)
        assert report.result is not None
        assert report.result.run.status is RunStatus.AWAITING_RESOLUTION
        assert (await store_b.get_run(stuck.id)).lease is None
        resume.set()  # SIGCONT
        with caplog.at_level(logging.WARNING), pytest.raises(LeaseLostError):
            await sending
        assert not [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]
        run = await store_b.get_run(stuck.id)
        assert run.status is RunStatus.AWAITING_RESOLUTION
        (record,) = await store_b.get_executions(stuck.id)
        assert record.result_status is ToolStatus.UNKNOWN
        kinds = [r[1] for r in shape(await store_b.read_messages(session.id))]
        assert kinds == ["user", "assistant"]  # A's "succeeded" result was not written
        await b.resolve(stuck.id, "c1", "succeeded", "checked the deployment: it ran")
        done = await b.resume(stuck.id)
        assert done.run.status is RunStatus.COMPLETED
        assert effects == ["c1"]  # the effect ran once; nobody ran it again
        await store_a.close()
        if store_b is not store_a:
            await store_b.close()

    asyncio.run(go())


def test_a_carried_result_fenced_off_with_its_step_is_recovered_from_its_record(
    opener: Opener,
) -> None:
    """A's result rides with its next step (the model answers at once); B took the run
    over in between, so both are refused. The result is not lost silently: B's recovery
    finds the side effect started without a result and makes it ``unknown``."""

    async def go() -> None:
        store_a, store_b = opener(), opener()
        clock_a = FixedClock()
        clock_b = FixedClock(clock_a.now() + 10 * LEASE)
        effects: list[str] = []

        async def deploy(inv: ToolInvocation) -> str:
            effects.append(inv.call.id)
            # B takes the run over while A's result waits to ride with its next step.
            await store_b.claim_run(
                inv.run_id, owner="worker-b", now=clock_b.now(), expires_at=clock_b.now()
            )
            return "deployed"

        tool = RecordingTool(spec("deploy", EffectClass.SIDE_EFFECT), fn=deploy)
        turns_a = Turns([reply("", call("deploy", {"text": "x"}, "c1")), reply("next step")])
        a = _service(store_a, "worker-a", clock_a, turns_a, tool)
        b = _service(store_b, "worker-b", clock_b, Turns([reply("done")]), tool)
        session = await a.create_session()
        with pytest.raises(LeaseLostError):
            await a.send(session.id, "deploy it")
        assert [r[1] for r in shape(await store_b.read_messages(session.id))] == [
            "user", "assistant",
        ]  # fmt: skip
        (stuck,) = await store_b.list_stale_runs(now=clock_b.now())
        (report,) = await b.recover(run_id=stuck.id)
        assert report.result is not None
        assert report.result.run.status is RunStatus.AWAITING_RESOLUTION
        (record,) = await store_b.get_executions(stuck.id)
        assert record.result_status is ToolStatus.UNKNOWN
        assert effects == ["c1"]
        await store_a.close()
        if store_b is not store_a:
            await store_b.close()

    asyncio.run(go())
