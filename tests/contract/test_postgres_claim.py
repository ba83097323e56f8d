"""PostgreSQL's starting claim (:class:`~plait.application.claiming.StartingQueue`): the
claim, the run's "running" write and the read of its history in one statement, and a
worker over it: runs complete, and a worker that dies right after its claim leaves a run
that another worker recovers (no call run twice, no message lost or duplicated)."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import pytest

from plait.adapters.stores.postgres.store import PostgresStore
from plait.adapters.system import RandomIds, SystemClock
from plait.application.claiming import StartingQueue
from plait.application.ports import Commit, ModelRequest, ModelResponse, RawToolCall
from plait.application.service import AgentService
from plait.application.worker import Worker
from plait.domain.messages import ToolResultMessage, UserMessage
from plait.domain.runs import Budget, RunStatus
from plait.entrypoints.http.events import encode_event
from plait.testing import FunctionModel, echo_tool
from tests.contract.builders import assistant, new_run, new_session, user
from tests.pg import empty_database, run_with


@pytest.fixture
def url(pg_url: str) -> str:
    empty_database(pg_url)
    return pg_url


async def queue(store: PostgresStore, sid: str, rid: str, at: float, **kw: Any) -> None:
    await store.create_session(new_session(sid, owner="alice", title="t"))
    run = new_run(rid, session_id=sid, status=RunStatus.QUEUED, started_at=at, **kw)
    msg = user(f"m-{rid}", run_id=rid)
    await store.start_run(Commit(session_id=sid, expected_version=0, run=run, messages=(msg,)))


def test_the_claim_starts_the_run_and_returns_its_history(url: str) -> None:
    async def go(store: PostgresStore) -> None:
        assert isinstance(store, StartingQueue)
        none = await store.claim_and_start_run(
            owner="w", now=1.0, expires_at=2.0, model="m", model_spec=None
        )
        assert none is None
        await queue(store, "s2", "r2", 20.0, budget=Budget(deadline_seconds=None))
        await queue(store, "s1", "r1", 10.0, budget=Budget(deadline_seconds=30.0))
        got = await store.claim_and_start_run(
            owner="w1", now=100.0, expires_at=160.0, model="gpt", model_spec="openai:gpt"
        )
        assert got is not None
        run = got.run
        assert (run.id, run.status, run.model, run.model_spec) == (
            "r1", RunStatus.RUNNING, "gpt", "openai:gpt",
        )  # fmt: skip
        assert run.lease is not None and (run.lease.owner, run.lease.expires_at) == ("w1", 160.0)
        assert run.deadline_at == 130.0 and run.budget.deadline_seconds == 30.0
        assert run == await store.get_run("r1")  # persisted as returned
        assert got.session == await store.get_session("s1")
        assert got.session.version == 1 and got.session.active_run_id == "r1"
        assert list(got.history) == await store.read_messages("s1")
        assert isinstance(got.history[0].message, UserMessage)
        # No deadline in the budget: none recorded; the run now running is not queued.
        second = await store.claim_and_start_run(
            owner="w2", now=100.0, expires_at=160.0, model="gpt", model_spec=None
        )
        assert second is not None and second.run.id == "r2" and second.run.deadline_at is None
        again = await store.claim_and_start_run(
            owner="w3", now=1e9, expires_at=2e9, model="gpt", model_spec=None
        )
        assert again is None
        # A worker that died right after its claim: its run is found by recovery.
        stale = await store.list_stale_runs(now=170.0)
        assert [r.id for r in stale] == ["r1", "r2"]

    run_with(url, go)


def test_the_claim_returns_a_longer_history_in_order_and_a_cancel_request(url: str) -> None:
    async def go(store: PostgresStore) -> None:
        await store.create_session(new_session("s1"))
        first = new_run("r0", status=RunStatus.COMPLETED, started_at=1.0)
        earlier = (user("u0", run_id="r0"), assistant("a0"))
        await store.start_run(
            Commit(session_id="s1", expected_version=0, messages=earlier, run=first)
        )
        queued = new_run("r1", status=RunStatus.QUEUED, started_at=2.0)
        mine = (user("u1", run_id="r1"),)
        await store.start_run(
            Commit(session_id="s1", expected_version=2, messages=mine, run=queued)
        )
        await store.request_cancel("r1")
        got = await store.claim_and_start_run(
            owner="w", now=3.0, expires_at=9.0, model="m", model_spec=None
        )
        assert got is not None and got.run.cancel_requested
        assert [s.seq for s in got.history] == [1, 2, 3] and got.session.version == 3
        assert [s.message.id for s in got.history] == ["u0", "a0", "u1"]

    run_with(url, go)


def test_concurrent_starting_claims_never_share_a_run(url: str) -> None:
    async def go(store: PostgresStore) -> None:
        other = PostgresStore(url)
        try:
            for i in range(6):
                await queue(store, f"s{i}", f"r{i}", float(i))
            claims = [
                (store if i % 2 else other).claim_and_start_run(
                    owner=f"w{i}", now=1.0, expires_at=99.0, model="m", model_spec=None
                )
                for i in range(10)
            ]
            got = [c for c in await asyncio.gather(*claims) if c is not None]
            assert sorted(c.run.id for c in got) == [f"r{i}" for i in range(6)]
        finally:
            await other.close()

    run_with(url, go)


class Model:
    """One echo call then an answer; the first ``hang`` calls never return."""

    def __init__(self, hang: int = 0) -> None:
        self.hang = hang

    async def __call__(self, request: ModelRequest) -> ModelResponse:
        if self.hang > 0:
            self.hang -= 1
            await asyncio.sleep(3600)
        if isinstance(request.context.items[-1], ToolResultMessage):
            return ModelResponse(text="done")
        call = RawToolCall(id="c1", name="echo", arguments={"text": "x"})
        return ModelResponse(tool_calls=(call,))


def service(store: PostgresStore, model: Model, owner: str, tool: Any) -> AgentService:
    return AgentService.build(
        store=store, artifacts=store, model=FunctionModel(model, name="m"), tools=[tool.tool],
        clock=SystemClock(), ids=RandomIds(), owner=owner, lease_seconds=0.6,
    )  # fmt: skip


async def until(predicate: Any) -> None:
    async with asyncio.timeout(10.0):
        while not await predicate():  # noqa: ASYNC110 - another worker's progress
            await asyncio.sleep(0.01)


@pytest.mark.slow
def test_a_run_whose_worker_died_after_the_claim_is_recovered_once(url: str) -> None:
    async def go(store: PostgresStore) -> None:
        tool = echo_tool()
        dead = service(store, Model(hang=1), "dead", tool)
        s = await dead.create_session()
        run = await dead.submit(s.id, "go")
        now = SystemClock().now()
        claimed = await store.claim_and_start_run(
            owner="dead", now=now, expires_at=now + 0.3, model="m", model_spec=None
        )
        assert claimed is not None and claimed.run.id == run.id
        crashed = asyncio.create_task(dead.execute(claimed))
        await asyncio.sleep(0.05)  # the model call hangs; the process dies
        assert dead.abandon(run.id)
        with contextlib.suppress(Exception, asyncio.CancelledError):
            await crashed
        assert (await store.get_run(run.id)).status is RunStatus.RUNNING
        alive = service(store, Model(), "alive", tool)
        w = Worker(service=alive, queue=store, encode=encode_event, poll_seconds=0.01)
        stop = asyncio.Event()
        t = asyncio.create_task(w.run(stop))

        async def done() -> bool:
            return (await store.get_run(run.id)).status.terminal

        await until(done)
        stop.set()
        stats = await t
        assert stats.recovered == 1 and stats.claimed == 0
        assert (await store.get_run(run.id)).status is RunStatus.COMPLETED
        kinds = [m.message.kind for m in await store.read_messages(s.id)]
        assert kinds == ["user", "assistant", "tool_result", "assistant"]
        assert len(tool.invocations) == 1

    run_with(url, go)


def test_a_worker_on_postgres_starts_runs_in_its_claim(url: str) -> None:
    async def go(store: PostgresStore) -> None:
        tool = echo_tool()
        svc = service(store, Model(), "w1", tool)
        s = await svc.create_session()
        run = await svc.submit(s.id, "go", budget=Budget(deadline_seconds=600.0))
        w = Worker(service=svc, queue=store, encode=encode_event, poll_seconds=0.01)
        stop = asyncio.Event()
        t = asyncio.create_task(w.run(stop))

        async def done() -> bool:
            return (await store.get_run(run.id)).status.terminal

        await until(done)
        stop.set()
        assert (await t).claimed == 1
        ended = await store.get_run(run.id)
        assert ended.status is RunStatus.COMPLETED and ended.model == "m"
        assert ended.deadline_at is not None and ended.deadline_at > ended.started_at + 599
        events = [e.type.value for e in await store.read_run_events(run.id)]
        assert events[0] == "run_started" and events[-1] == "run_finished"

    run_with(url, go)


def test_after_a_claim_an_empty_summary_state_is_known_without_a_read(url: str) -> None:
    from tests.contract.summary_contract import summary
    from tests.contract.test_postgres_context_cache import at_once

    async def go(store: PostgresStore) -> None:
        await queue(store, "s1", "r1", 1.0)
        await queue(store, "s2", "r2", 2.0)
        await store.activate_summary(summary(1, session_id="s2"), expected_generation=0)
        first = await store.claim_and_start_run(
            owner="w", now=3.0, expires_at=9.0, model="m", model_spec=None
        )
        assert first is not None and first.run.id == "r1"
        assert at_once(store.summary_and_constraints("s1")) == (None, [])
        second = await store.claim_and_start_run(
            owner="w", now=3.0, expires_at=9.0, model="m", model_spec=None
        )
        assert second is not None and second.run.id == "r2"
        assert at_once(store.summary_and_constraints("s2")) is None  # it has a summary
        found, _ = await store.summary_and_constraints("s2")
        assert found is not None and found.generation == 1

    run_with(url, go)


@pytest.mark.slow
def test_the_starting_claim_gives_the_run_a_new_lease_token(url: str) -> None:
    from plait.domain.errors import LeaseLostError

    async def go(store: PostgresStore) -> None:
        await queue(store, "s1", "r1", 10.0)
        first = await store.claim_and_start_run(
            owner="w1", now=100.0, expires_at=110.0, model="m", model_spec=None
        )
        assert first is not None and first.run.lease_token == 1
        again = await store.claim_run("r1", owner="w2", now=200.0, expires_at=260.0)
        assert again.lease_token == 2
        late = Commit(
            session_id="s1", expected_version=1, messages=(user("m-late"),),
            lease_owner="w1", lease_token=1, lease_run_id="r1",
        )  # fmt: skip
        with pytest.raises(LeaseLostError):
            await store.commit(late)
        assert [m.message.id for m in await store.read_messages("s1")] == ["m-r1"]

    run_with(url, go)
