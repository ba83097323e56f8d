"""Workers over a shared store: claim queued runs, persist events, shut down gracefully
(release the lease so another worker recovers the run), recover a dead worker's run."""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import replace
from typing import Any

from plait.adapters.stores.memory.store import MemoryStore
from plait.adapters.system import RandomIds, SystemClock
from plait.application.ports import Commit, ModelRequest, ModelResponse, RawToolCall
from plait.application.service import AgentService
from plait.application.worker import RESERVED_BEYOND_RUNS, Worker, WorkerStats
from plait.domain.errors import PlaitError
from plait.domain.messages import ToolResultMessage
from plait.domain.runs import Run, RunStatus
from plait.domain.service import EventType
from plait.domain.subagents import ParentCall
from plait.entrypoints.http.events import encode_event
from plait.testing import FunctionModel, echo_tool
from tests.contract.builders import new_run, new_session


async def _child(
    store: MemoryStore, run_id: str, parent_session: str, parent_run: str, owner: str, until: float
) -> None:
    """A sub-agent's running run, leased to ``owner`` until ``until``."""
    parent = ParentCall(session_id=parent_session, run_id=parent_run, call_id="c0", agent="a")
    sid = f"s_{run_id}"
    await store.create_session(new_session(sid, created_at=SystemClock().now()))
    child = new_run(run_id, session_id=sid, started_at=SystemClock().now(),
                    status=RunStatus.RUNNING, parent=parent)  # fmt: skip
    await store.start_run(Commit(session_id=sid, expected_version=0, run=child))
    await store.claim_run(run_id, owner=owner, now=SystemClock().now(), expires_at=until)


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
        call = RawToolCall(
            id=f"c{len(request.context.items)}", name="echo", arguments={"text": "x"}
        )
        return ModelResponse(tool_calls=(call,))


def service(store: MemoryStore, model: Model, owner: str, tool: Any) -> AgentService:
    return AgentService.build(
        store=store, artifacts=store, model=FunctionModel(model, name="m"), tools=[tool.tool],
        clock=SystemClock(), ids=RandomIds(), owner=owner, lease_seconds=0.6,
    )  # fmt: skip


async def until(predicate: Any) -> None:
    """Poll the store (another worker's progress has no in-process signal)."""
    async with asyncio.timeout(10.0):
        while not await predicate():  # noqa: ASYNC110
            await asyncio.sleep(0.01)


async def work_until(worker: Worker, predicate: Any) -> WorkerStats:
    """Run ``worker`` until ``predicate`` holds, then stop it gracefully: its stats."""
    stop = asyncio.Event()
    task = asyncio.create_task(worker.run(stop))
    await until(predicate)
    stop.set()
    return await task


def ended(store: MemoryStore, run_id: str) -> Any:
    """A predicate for :func:`until`: the run has ended."""

    async def check() -> bool:
        return (await store.get_run(run_id)).status.terminal

    return check


async def held_by_a_dead_process(
    store: MemoryStore, tool: Any, owner: str, expires_at: float
) -> Run:
    """A run the process ``owner`` started and died in, mid-model-call: nothing more is
    written, its lease (until ``expires_at``) is neither renewed nor released."""
    svc = service(store, Model(hang=1), owner, tool)
    s = await svc.create_session()
    run = await svc.submit(s.id, "go")
    now = SystemClock().now()
    claimed = await store.claim_queued_run(owner=owner, now=now, expires_at=expires_at)
    assert claimed is not None
    task = asyncio.create_task(svc.execute(claimed))

    async def running() -> bool:
        return (await store.get_run(run.id)).status is RunStatus.RUNNING

    await until(running)
    assert svc.abandon(run.id)
    with contextlib.suppress(PlaitError, asyncio.CancelledError):
        await task
    return run


def test_a_worker_runs_queued_runs_and_persists_their_events() -> None:
    async def go() -> None:
        store = MemoryStore()
        tool = echo_tool()
        svc = service(store, Model(), "w1", tool)
        runs = []
        for _ in range(5):
            s = await svc.create_session(owner="ana")
            runs.append(await svc.submit(s.id, "go"))
        assert all(r.status is RunStatus.QUEUED for r in runs)
        worker = Worker(service=svc, queue=store, encode=encode_event, concurrency=2,
                        poll_seconds=0.01)  # fmt: skip

        async def all_done() -> bool:
            return all([(await store.get_run(r.id)).status.terminal for r in runs])

        stats = await work_until(worker, all_done)
        assert stats.claimed == 5 and stats.finished == {"completed": 5}
        assert len(tool.invocations) == 5
        for r in runs:
            events = await store.read_run_events(r.id)
            types = [e.type for e in events]
            assert types[0] is EventType.RUN_STARTED and types[-1] is EventType.RUN_FINISHED
            assert EventType.TOOL_CALL_REQUESTED in types and EventType.TOOL_RESULT in types
            assert [e.seq for e in events] == list(range(1, len(events) + 1))
            assert (await store.get_session(r.session_id)).active_run_id is None

    asyncio.run(go())


def test_graceful_shutdown_releases_the_lease_and_another_worker_recovers() -> None:
    async def go() -> None:
        store = MemoryStore()
        tool = echo_tool()
        first = service(store, Model(hang=1), "w1", tool)
        s = await first.create_session()
        run = await first.submit(s.id, "go")
        w1 = Worker(service=first, queue=store, encode=encode_event, poll_seconds=0.01,
                    grace_seconds=0.05)  # fmt: skip
        stop1 = asyncio.Event()
        t1 = asyncio.create_task(w1.run(stop1))

        async def running() -> bool:
            return (await store.get_run(run.id)).status is RunStatus.RUNNING

        await until(running)
        stop1.set()
        stats1 = await t1
        assert stats1.released == 1 and stats1.finished == {}
        left = await store.get_run(run.id)
        assert left.status is RunStatus.RUNNING and left.lease is not None
        assert left.lease.owner == "w1" and left.lease.expires_at <= SystemClock().now()

        second = service(store, Model(), "w2", tool)
        w2 = Worker(service=second, queue=store, encode=encode_event, poll_seconds=0.01)
        stop2 = asyncio.Event()
        t2 = asyncio.create_task(w2.run(stop2))

        async def done() -> bool:
            return (await store.get_run(run.id)).status.terminal

        await until(done)
        stop2.set()
        stats2 = await t2
        assert stats2.recovered == 1 and stats2.claimed == 0
        assert (await store.get_run(run.id)).status is RunStatus.COMPLETED
        kinds = [m.message.kind for m in await store.read_messages(s.id)]
        assert kinds == ["user", "assistant", "tool_result", "assistant"]
        assert len(tool.invocations) == 1

    asyncio.run(go())


def test_a_dead_workers_run_is_recovered_after_its_lease_expires() -> None:
    async def go() -> None:
        store = MemoryStore()
        tool = echo_tool()
        # the process dies; its lease expires in 0.3 s
        run = await held_by_a_dead_process(store, tool, "dead", SystemClock().now() + 0.3)
        assert (await store.get_run(run.id)).status is RunStatus.RUNNING
        alive = service(store, Model(), "alive", tool)
        w = Worker(service=alive, queue=store, encode=encode_event, poll_seconds=0.01)
        assert (await work_until(w, ended(store, run.id))).recovered == 1
        kinds = [m.message.kind for m in await store.read_messages(run.session_id)]
        assert kinds == ["user", "assistant", "tool_result", "assistant"]

    asyncio.run(go())


def test_events_of_several_runs_within_the_linger_share_one_write() -> None:
    from plait.application.events import ModelCallStarted
    from plait.application.worker import _EventSink

    class Counting(MemoryStore):
        def __init__(self) -> None:
            super().__init__()
            self.writes: list[dict[str, int]] = []

        async def append_run_events_batch(self, batch: Any, **kw: Any) -> Any:
            self.writes.append({r: len(es) for r, es in batch.items()})
            return await super().append_run_events_batch(batch, **kw)

    async def go(linger: float) -> list[dict[str, int]]:
        store = Counting()
        sink = _EventSink(store, encode_event, SystemClock().now, None, linger)
        sink.start()
        sink.observer("r1")(ModelCallStarted("r1", 1, 1))
        await asyncio.sleep(0)  # the sink takes the first event: r2's comes a moment later
        sink.observer("r2")(ModelCallStarted("r2", 1, 1))
        await sink.close()
        assert [e.seq for e in await store.read_run_events("r2")] == [1]
        return store.writes

    assert asyncio.run(go(0.05)) == [{"r1": 1, "r2": 1}]
    assert asyncio.run(go(0.0)) == [{"r1": 1}, {"r2": 1}]


def test_the_runs_of_a_dead_process_of_this_host_are_taken_over_before_their_leases_expire() -> (
    None
):
    """A store without presence (SQLite): ``plait serve`` killed and started again finds
    its run leased for another minute to a process that is gone. Given ``owner_alive``,
    the worker takes such runs over at its first look; a run whose holder still runs (or
    that cannot be told) is left to its lease. Two workers looking at once take it once."""

    async def go() -> None:
        store = MemoryStore()
        tool = echo_tool()
        now = SystemClock().now()
        runs = {}
        for owner in ("gone", "running", "elsewhere"):  # each leased for another hour
            runs[owner] = await held_by_a_dead_process(store, tool, owner, now + 3600)
        # a sub-agent's run held by the same dead process, its parent not ended: the
        # parent's recovery (forced) continues it, so the worker leaves it to that
        parent = runs["running"]
        await _child(store, "r_child", parent.session_id, parent.id, "gone", now + 3600)
        # a run the dead process claimed from the queue but never started
        svc = service(store, Model(), "gone", tool)
        s = await svc.create_session()
        runs["claimed"] = await svc.submit(s.id, "go")
        await store.claim_queued_run(owner="gone", now=now, expires_at=now + 3600)
        alive = {"gone": False, "running": True, "elsewhere": None}.get
        workers = [
            Worker(service=service(store, Model(), name, tool), queue=store,
                   encode=encode_event, poll_seconds=0.01, owner_alive=alive)
            for name in ("w1", "w2")
        ]  # fmt: skip
        stop = asyncio.Event()
        tasks = [asyncio.create_task(w.run(stop)) for w in workers]

        async def done() -> bool:
            taken = [runs["gone"].id, runs["claimed"].id]
            return all([(await store.get_run(r)).status.terminal for r in taken])

        await until(done)
        stop.set()
        stats = [await t for t in tasks]
        assert sum(s.recovered for s in stats) == 1 and sum(s.claimed for s in stats) == 1
        for name in ("gone", "claimed"):
            assert (await store.get_run(runs[name].id)).status is RunStatus.COMPLETED
            kinds = [m.message.kind for m in await store.read_messages(runs[name].session_id)]
            assert kinds == ["user", "assistant", "tool_result", "assistant"]
        held = [(owner, runs[owner].id) for owner in ("running", "elsewhere")]
        for owner, run_id in [*held, ("gone", "r_child")]:
            left = await store.get_run(run_id)
            assert left.status is RunStatus.RUNNING
            assert left.lease is not None and left.lease.owner == owner

    asyncio.run(go())


def test_without_owner_alive_a_dead_processs_run_waits_for_its_lease() -> None:
    async def go() -> None:
        store = MemoryStore()
        tool = echo_tool()
        run = await held_by_a_dead_process(store, tool, "gone", SystemClock().now() + 3600)
        w = Worker(service=service(store, Model(), "w", tool), queue=store,
                   encode=encode_event, poll_seconds=0.01)  # fmt: skip
        stop = asyncio.Event()
        t = asyncio.create_task(w.run(stop))
        await asyncio.sleep(0.8)  # more than two looks (every half lease: 0.3 s)
        stop.set()
        assert (await t).recovered == 0
        left = await store.get_run(run.id)
        assert left.status is RunStatus.RUNNING and left.lease is not None
        assert left.lease.owner == "gone"

    asyncio.run(go())


def test_a_stale_sub_agent_run_is_left_to_its_parent_until_the_parent_has_ended() -> None:
    """Recovering a child whose parent has not ended would make two drivers of it: the
    parent's recovery takes its child over by force. A child whose parent has ended (or
    is gone) is recovered on its own."""

    async def go() -> None:
        store = MemoryStore()
        tool = echo_tool()
        now = SystemClock().now()
        svc = service(store, Model(hang=1), "p", tool)
        s = await svc.create_session()
        parent = await svc.submit(s.id, "go")
        await store.claim_run(parent.id, owner="p", now=now, expires_at=now + 3600)
        await _child(store, "r_live_parent", s.id, parent.id, "dead", now)  # expired
        await _child(store, "r_no_parent", "s_x", "r_x", "dead", now)
        w = Worker(service=service(store, Model(), "w", tool), queue=store,
                   encode=encode_event, poll_seconds=0.01)  # fmt: skip
        stop = asyncio.Event()
        t = asyncio.create_task(w.run(stop))

        async def orphan_done() -> bool:
            return (await store.get_run("r_no_parent")).status.terminal

        await until(orphan_done)
        await asyncio.sleep(0.7)  # two more looks (every half lease: 0.3 s)
        stop.set()
        assert (await t).recovered == 1
        left = await store.get_run("r_live_parent")
        assert left.status is RunStatus.RUNNING
        assert left.lease is not None and left.lease.owner == "dead"

    asyncio.run(go())


class ReservingStore(MemoryStore):
    """A store whose connections a worker reserves (as PostgreSQL's): records when."""

    capabilities = replace(MemoryStore.capabilities, reserves_connections=True)

    def __init__(self) -> None:
        super().__init__()
        self.reserved: list[tuple[int, int]] = []  # (count, runs claimed before it)
        self.claims = 0

    async def reserve_connections(self, count: int) -> None:
        self.reserved.append((count, self.claims))

    async def claim_queued_run(self, **kw: Any) -> Run | None:
        found = await super().claim_queued_run(**kw)
        self.claims += found is not None
        return found


def test_a_worker_reserves_its_connections_before_its_first_claim() -> None:
    async def go() -> None:
        store = ReservingStore()
        svc = service(store, Model(), "w1", echo_tool())
        s = await svc.create_session(owner="ana")
        run = await svc.submit(s.id, "go")
        worker = Worker(service=svc, queue=store, encode=encode_event, concurrency=3,
                        poll_seconds=0.01)  # fmt: skip
        await work_until(worker, ended(store, run.id))
        assert store.reserved == [(3 + RESERVED_BEYOND_RUNS, 0)]  # once, before any claim
        assert store.claims == 1

    asyncio.run(go())


def test_a_freed_slot_and_stop_end_the_wait_between_polls_at_once() -> None:
    """With an hour between polls, a worker of one slot still claims the next queued run
    as soon as the previous one ends, and ``stop`` ends its wait at once."""

    async def go() -> None:
        store = MemoryStore()
        tool = echo_tool()
        svc = service(store, Model(), "w1", tool)
        runs = [await svc.submit((await svc.create_session()).id, "go") for _ in range(3)]
        worker = Worker(service=svc, queue=store, encode=encode_event, concurrency=1,
                        poll_seconds=3600)  # fmt: skip
        stop = asyncio.Event()
        task = asyncio.create_task(worker.run(stop))
        async with asyncio.timeout(10.0):  # an hour's poll would fail this
            for run in runs:
                await until(ended(store, run.id))
            stop.set()
            stats = await task
        assert stats.claimed == 3 and stats.finished == {"completed": 3}

    asyncio.run(go())


def test_a_wait_in_an_outage_is_ended_by_stop_not_by_a_freed_slot() -> None:
    async def go() -> None:
        store = MemoryStore()
        svc = service(store, Model(), "w1", echo_tool())
        worker = Worker(service=svc, queue=store, encode=encode_event, poll_seconds=3600)
        stop = asyncio.Event()
        worker._stopping = asyncio.ensure_future(stop.wait())
        outage = asyncio.create_task(worker._sleep(stop, 3600))
        poll = asyncio.create_task(worker._sleep(stop))
        await asyncio.sleep(0.05)
        worker._slot_freed()  # the poll's wait ends, the outage's does not
        await asyncio.wait_for(poll, 1.0)
        await asyncio.sleep(0.05)
        assert not outage.done()
        stop.set()
        await asyncio.wait_for(outage, 1.0)

    asyncio.run(go())
