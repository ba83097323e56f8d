"""A worker's presence on PostgreSQL (:class:`~plait.application.claiming.WorkerPresence`):
the runs of a worker whose process died are stale at once (its presence connection
closed), not when their leases expire; a run of an owner that never held its presence
keeps the lease rule alone, and a live owner's runs are never taken."""

from __future__ import annotations

import asyncio
import warnings
from typing import Any

import pytest

from plait.adapters.stores.postgres.presence import HELD
from plait.adapters.stores.postgres.store import PostgresStore
from plait.adapters.system import RandomIds, SystemClock
from plait.application.claiming import WorkerPresence
from plait.application.ports import ModelRequest, ModelResponse, RawToolCall
from plait.application.service import AgentService
from plait.application.worker import Worker
from plait.domain.errors import LeaseLostError
from plait.domain.messages import ToolResultMessage, UserMessage
from plait.domain.runs import RunStatus
from plait.entrypoints.http.events import encode_event
from plait.testing import FunctionModel, echo_tool
from tests.contract.test_postgres_claim import Model, queue, service, until
from tests.pg import empty_database


@pytest.fixture
def url(pg_url: str) -> str:
    empty_database(pg_url)
    return pg_url


def quick(url: str) -> PostgresStore:
    """A store whose presence applies the orphan rule as soon as it is held."""
    return PostgresStore(url, presence_settle_seconds=0.0)


def run_with(url: str, go: Any) -> None:
    """``go`` with a store watching: its presence held (the orphan rule applies where
    the store's own presence is held and settled)."""

    async def main() -> None:
        store = quick(url)
        try:
            await store.hold_presence("w-watch")
            await go(store)
        finally:
            await store.close()

    asyncio.run(main())


async def gone(store: PostgresStore, holder: PostgresStore, owner: str) -> None:
    """Close ``holder`` (its process died) and wait until the server let go of its lock
    (a backend ends a moment after its client closed the connection)."""
    await holder.close()
    held = f"SELECT count(*) FROM ({HELD}) h WHERE objid = hashtext(%s)::oid"

    async def released() -> bool:
        row = await store._one(held, (owner,))
        return row is not None and row[0] == 0

    await until(released)


async def claim(store: PostgresStore, owner: str, until_at: float = 1e9) -> str:
    got = await store.claim_and_start_run(
        owner=owner, now=1.0, expires_at=until_at, model="m", model_spec=None
    )
    assert got is not None
    return got.run.id


def test_the_runs_of_an_owner_whose_presence_ended_are_stale_at_once(url: str) -> None:
    async def go(store: PostgresStore) -> None:
        for i in range(3):
            await queue(store, f"s{i}", f"r{i}", float(i))
        dying, alive = PostgresStore(url), PostgresStore(url)
        try:
            assert isinstance(dying, WorkerPresence)
            await dying.hold_presence("w-dying")
            await dying.hold_presence("w-dying")  # again: nothing changes
            await alive.hold_presence("w-alive")
            assert await claim(dying, "w-dying") == "r0"
            assert await claim(alive, "w-alive") == "r1"
            assert await claim(store, "w-never") == "r2"  # an owner without presence
            assert await store.list_stale_runs(now=2.0) == []
            await gone(store, dying, "w-dying")  # its process died: the lock went
            stale = await store.list_stale_runs(now=2.0)
            assert [r.id for r in stale] == ["r0"]
            before = stale[0].lease_token
            taken = await store.claim_run("r0", owner="w-alive", now=2.0, expires_at=9.0)
            assert taken.lease is not None and taken.lease.owner == "w-alive"
            assert taken.lease_token == before + 1  # the dead owner's writes are fenced
            # A live owner's run and a run without presence are not taken before expiry.
            for run_id in ("r1", "r2"):
                with pytest.raises(LeaseLostError):
                    await store.claim_run(run_id, owner="w-other", now=2.0, expires_at=9.0)
            assert await store.list_stale_runs(now=2.0) == []
        finally:
            await dying.close()
            await alive.close()

    run_with(url, go)


def test_a_new_presence_under_the_same_owner_makes_its_runs_live_again(url: str) -> None:
    async def go(store: PostgresStore) -> None:
        await queue(store, "s0", "r0", 0.0)
        first = PostgresStore(url)
        await first.hold_presence("w1")
        await claim(first, "w1")
        await gone(store, first, "w1")
        assert [r.id for r in await store.list_stale_runs(now=2.0)] == ["r0"]
        await store.hold_presence("w1")
        assert await store.list_stale_runs(now=2.0) == []

    run_with(url, go)


@pytest.mark.slow
def test_a_worker_recovers_a_dead_workers_run_before_its_lease_expires(url: str) -> None:
    async def go(store: PostgresStore) -> None:
        tool = echo_tool()
        dead_store = PostgresStore(url)
        dead = service(dead_store, Model(), "dead", tool)
        s = await dead.create_session()
        run = await dead.submit(s.id, "go")
        await dead_store.hold_presence("dead")
        now = SystemClock().now()
        claimed = await dead_store.claim_and_start_run(  # a lease of an hour
            owner="dead", now=now, expires_at=now + 3600, model="m", model_spec=None
        )
        assert claimed is not None and claimed.run.id == run.id
        await gone(store, dead_store, "dead")  # the process died right after its claim
        alive = service(store, Model(), "alive", tool)
        alive.lease_seconds = 3600.0  # only presence can free the run in this test
        w = Worker(service=alive, queue=store, encode=encode_event, poll_seconds=0.01)
        stop = asyncio.Event()
        task = asyncio.create_task(w.run(stop))

        async def done() -> bool:
            return (await store.get_run(run.id)).status.terminal

        try:
            await until(done)
        finally:
            stop.set()
            stats = await task
        assert stats.recovered == 1
        assert (await store.get_run(run.id)).status is RunStatus.COMPLETED
        assert len(tool.invocations) == 1

    run_with(url, go)


def test_a_worker_holds_its_presence_before_it_claims(url: str) -> None:
    async def go(store: PostgresStore) -> None:
        tool = echo_tool()
        svc = service(store, Model(), "w", tool)
        s = await svc.create_session()
        run = await svc.submit(s.id, "go")
        w = Worker(service=svc, queue=store, encode=encode_event, poll_seconds=0.01)
        stop = asyncio.Event()
        task = asyncio.create_task(w.run(stop))

        async def done() -> bool:
            return (await store.get_run(run.id)).status.terminal

        try:
            await until(done)
        finally:
            stop.set()
            await task
        owners: Any = await store._all("SELECT owner FROM worker_presence", ())
        assert ("w",) in owners

    run_with(url, go)


class GatedModel:
    """Records which message each run began with; the run of ``gated`` waits for ``gate``."""

    def __init__(self, gated: str) -> None:
        self.gated = gated
        self.gate = asyncio.Event()
        self.began: list[str] = []

    async def __call__(self, request: ModelRequest) -> ModelResponse:
        last = request.context.items[-1]
        if isinstance(last, ToolResultMessage):
            return ModelResponse(text="done")
        assert isinstance(last, UserMessage)
        self.began.append(last.text)
        if last.text == self.gated:
            await self.gate.wait()
        call = RawToolCall(id="c1", name="echo", arguments={"text": "x"})
        return ModelResponse(tool_calls=(call,))


@pytest.mark.slow
def test_a_full_worker_takes_a_dead_workers_run_before_the_next_queued_one(url: str) -> None:
    async def go(store: PostgresStore) -> None:
        tool = echo_tool()
        model = GatedModel("first")
        svc = AgentService.build(
            store=store, artifacts=store, model=FunctionModel(model, name="m"),
            tools=[tool.tool], clock=SystemClock(), ids=RandomIds(), owner="alive",
            lease_seconds=3600.0,
        )  # fmt: skip
        dead_store = PostgresStore(url)
        await dead_store.hold_presence("dead")
        orphan_session = await svc.create_session()
        orphan = await svc.submit(orphan_session.id, "orphan")
        now = SystemClock().now()
        got = await dead_store.claim_and_start_run(
            owner="dead", now=now, expires_at=now + 3600, model="m", model_spec=None
        )
        assert got is not None and got.run.id == orphan.id
        first = await svc.submit((await svc.create_session()).id, "first")
        w = Worker(service=svc, queue=store, encode=encode_event, concurrency=1,
                   poll_seconds=0.01)  # fmt: skip
        stop = asyncio.Event()
        task = asyncio.create_task(w.run(stop))

        async def began_first() -> bool:
            return model.began == ["first"]

        async def ended() -> bool:
            return all([(await store.get_run(r)).status.terminal for r in runs])

        runs = [orphan.id, first.id]
        try:
            await until(began_first)  # the worker is full
            runs.append((await svc.submit((await svc.create_session()).id, "second")).id)
            await gone(store, dead_store, "dead")  # found while the worker is full
            await asyncio.sleep(3 * w.presence_sweep_seconds)
            model.gate.set()
            await until(ended)
        finally:
            stop.set()
            stats = await task
        assert model.began == ["first", "orphan", "second"]
        assert stats.recovered == 1 and stats.claimed == 2

    run_with(url, go)


def test_a_new_holder_forgets_the_owners_that_are_gone_and_lease_nothing(url: str) -> None:
    async def go(store: PostgresStore) -> None:
        await queue(store, "s0", "r0", 0.0)
        for owner in ("w-idle", "w-busy", "w-alive"):
            holder = PostgresStore(url)
            await holder.hold_presence(owner)
            if owner == "w-busy":
                await claim(holder, owner)
            if owner == "w-alive":
                alive = holder
            else:
                await gone(store, holder, owner)
        try:
            await store.hold_presence("w-new")
            rows = await store._all("SELECT owner FROM worker_presence ORDER BY owner", ())
            owners = [row for row in rows if row != ("w-watch",)]  # the fixture's own
            # gone and leasing nothing: forgotten; gone with a live run: kept (its run is
            # an orphan until taken over); holding its lock: kept
            assert owners == [("w-alive",), ("w-busy",), ("w-new",)]
            assert [r.id for r in await store.list_stale_runs(now=2.0)] == ["r0"]
        finally:
            await alive.close()

    run_with(url, go)


def test_a_presence_whose_connection_was_cut_is_held_again(url: str) -> None:
    async def go(store: PostgresStore) -> None:
        holder = PostgresStore(url)
        try:
            await holder.hold_presence("w1")
            presence = holder._presence
            assert presence is not None and presence._conn is not None
            pid = presence._conn.info.backend_pid
            await store._one("SELECT pg_terminate_backend(%s)", (pid,))
            await queue(store, "s0", "r0", 0.0)
            await claim(holder, "w1")
            held = f"SELECT count(*) FROM ({HELD}) h WHERE objid = hashtext(%s)::oid"

            async def back() -> bool:
                row = await store._one(held, ("w1",))
                current = presence._conn
                again = current is not None and current.info.backend_pid != pid
                return again and row is not None and row[0] == 1

            await until(back)
            assert await store.list_stale_runs(now=2.0) == []
        finally:
            await holder.close()

    run_with(url, go)


def test_a_store_used_by_one_loop_after_another_holds_its_presence_in_the_new_one(
    url: str,
) -> None:
    store = PostgresStore(url)
    held = f"SELECT count(*) FROM ({HELD}) h WHERE objid = hashtext(%s)::oid"
    holders = "SELECT pid FROM pg_locks WHERE objid = hashtext(%s)::oid AND locktype = 'advisory'"

    async def hold(cut: bool) -> Any:
        await store.hold_presence("w1")
        if cut:  # its connection is cut: the presence of this loop takes it again
            (pid,) = await store._one(holders, ("w1",)) or (None,)
            await store._one("SELECT pg_terminate_backend(%s)", (pid,))

            async def again() -> bool:
                row = await store._one(holders, ("w1",))
                return row is not None and row[0] != pid

            await until(again)
        return await store._one(held, ("w1",))

    assert asyncio.run(hold(cut=False)) == (1,)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ResourceWarning)
        assert asyncio.run(hold(cut=True)) == (1,)  # a new loop, the first one closed
        asyncio.run(store.close())  # from a third loop: the lock is let go of

    async def released() -> None:
        other = PostgresStore(url)

        async def none_held() -> bool:
            return await other._one(held, ("w1",)) == (0,)

        try:
            await until(none_held)
        finally:
            await other.close()

    asyncio.run(released())


def test_only_a_store_whose_own_presence_is_settled_takes_orphans(url: str) -> None:
    async def go(store: PostgresStore) -> None:
        await queue(store, "s0", "r0", 0.0)
        dying = PostgresStore(url)
        await dying.hold_presence("w-dying")
        await claim(dying, "w-dying")
        await gone(store, dying, "w-dying")
        plain, fresh = PostgresStore(url), PostgresStore(url, presence_settle_seconds=3600)
        try:
            await fresh.hold_presence("w-fresh")  # just (re)taken, as after a restart
            for other in (plain, fresh):
                assert await other.list_stale_runs(now=2.0) == []
                with pytest.raises(LeaseLostError):
                    await other.claim_run("r0", owner="w-other", now=2.0, expires_at=9.0)
            assert [r.id for r in await store.list_stale_runs(now=2.0)] == ["r0"]
        finally:
            await plain.close()
            await fresh.close()

    run_with(url, go)
