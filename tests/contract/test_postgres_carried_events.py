"""PostgreSQL writes a run's pending events inside the run's commit (``plait_commit_events``,
:class:`~plait.application.ports.CarriesEvents`): one transaction, so the events are
written exactly when the step is, fenced by the same lease token; listeners are told
after the commit, in a statement of their own."""

from __future__ import annotations

import asyncio
import json

import psycopg
import pytest

from plait.adapters.stores.postgres import commit as commit_sql
from plait.adapters.stores.postgres import service
from plait.adapters.stores.postgres.arrays import Floats, Ints, Texts
from plait.adapters.stores.postgres.feed import PgEventFeed
from plait.adapters.stores.postgres.store import PostgresStore
from plait.adapters.system import RandomIds, SystemClock
from plait.application.ports import Commit
from plait.application.service import AgentService
from plait.application.worker import Worker
from plait.domain.errors import ConflictError, LeaseLostError
from plait.domain.runs import Run, RunStatus
from plait.domain.service import EventType, NewRunEvent
from plait.entrypoints.http.events import encode_event
from plait.testing import FunctionModel, echo_tool
from plait.testing.carrier import RecordingCarrier
from tests.contract.builders import assistant, new_run, new_session, user
from tests.contract.retention_contract import fork
from tests.contract.test_postgres_claim import Model
from tests.pg import empty_database, run_with


@pytest.fixture
def url(pg_url: str) -> str:
    empty_database(pg_url)
    return pg_url


def event(step: int) -> NewRunEvent:
    return NewRunEvent(type=EventType.STEP_STARTED, at=1_000.0 + step, data={"step": step})


async def claimed(store: PostgresStore, owner: str = "w1") -> Run:
    """Session s1 with its user message and run r1, claimed by ``owner``."""
    await store.create_session(new_session("s1"))
    run = new_run("r1", status=RunStatus.QUEUED)
    first = Commit(session_id="s1", expected_version=0, run=run, messages=(user("m1"),))
    await store.start_run(first)
    got = await store.claim_queued_run(owner=owner, now=1_001.0, expires_at=1_100.0)
    assert got is not None and got.lease_token is not None
    return got


async def claimed_second(store: PostgresStore) -> Run:
    """Session s2 with its user message and run r2, claimed by w1 (its second run)."""
    await store.create_session(new_session("s2"))
    other = new_run("r2", session_id="s2", status=RunStatus.QUEUED)
    first = Commit(
        session_id="s2", expected_version=0, run=other, messages=(user("n1", run_id="r2"),)
    )
    await store.start_run(first)
    second = await store.claim_queued_run(owner="w1", now=1_001.0, expires_at=1_100.0)
    assert second is not None and second.lease_token is not None
    return second


def step(run: Run, version: int, message_id: str, owner: str = "w1") -> Commit:
    return Commit(
        session_id="s1",
        expected_version=version,
        messages=(assistant(message_id, text="hi"),),
        lease_owner=owner,
        lease_token=run.lease_token,
        lease_run_id=run.id,
    )


def test_a_commit_writes_the_runs_pending_events_in_its_transaction(url: str) -> None:
    async def go(store: PostgresStore) -> None:
        run = await claimed(store)
        assert run.lease_token is not None
        await store.append_run_events("r1", [event(0)], lease_token=run.lease_token)
        carrier = RecordingCarrier()
        store.attach_carrier(carrier)
        carrier.hold("r1", run.lease_token, event(1), event(2))
        await store.commit(step(run, 1, "a1"))
        written = await store.read_run_events("r1")
        assert [(e.seq, e.data) for e in written] == [
            (1, {"step": 0}),
            (2, {"step": 1}),
            (3, {"step": 2}),
        ]
        assert [w for _, w in carrier.settled] == [{"r1": written[1:]}]
        assert [m.message.id for m in await store.read_messages("s1")] == ["m1", "a1"]
        # Nothing pending: the next commit is a plain one, and events go on numbering.
        await store.commit(step(run, 2, "a2"))
        carrier.hold("r1", run.lease_token, event(3))
        await store.commit(step(run, 3, "a3"))
        assert [e.seq for e in await store.read_run_events("r1")] == [1, 2, 3, 4]
        store.detach_carrier(carrier)
        carrier.hold("r1", run.lease_token, event(4))
        await store.commit(step(run, 4, "a4"))
        assert len(await store.read_run_events("r1")) == 4  # detached: not asked

    run_with(url, go)


def test_a_branch_refuses_an_id_its_inherited_prefix_holds_with_events_or_without(
    url: str,
) -> None:
    """The commit with events checks a new message against the branch's inherited prefix
    as the plain commit does (a fork copies no membership rows: the prefix is its
    parent's), and a branch without such an id commits and numbers its events."""

    async def go(store: PostgresStore) -> None:
        await store.create_session(new_session("s0"))
        seeded = Commit(session_id="s0", expected_version=0, messages=(user("m1"), user("m2")))
        await store.commit(seeded)
        await fork(store, "s0", "s1", 2)
        run = new_run("r1", status=RunStatus.QUEUED)
        first = Commit(session_id="s1", expected_version=2, run=run, messages=(user("u1"),))
        await store.start_run(first)
        claimed_run = await store.claim_queued_run(owner="w1", now=1_001.0, expires_at=1_100.0)
        assert claimed_run is not None and claimed_run.lease_token is not None
        carrier = RecordingCarrier()
        store.attach_carrier(carrier)
        for commit in (step(claimed_run, 3, "m1"), step(claimed_run, 3, "a1")):
            carrier.hold("r1", claimed_run.lease_token, event(commit.expected_version or 0))
            if commit.messages[0].id == "m1":  # in the parent's rows the branch inherits
                with pytest.raises(ConflictError):
                    await store.commit(commit)
                assert await store.read_run_events("r1") == []
                assert [w for _, w in carrier.settled] == [None]
                carrier.settled.clear()
                continue
            await store.commit(commit)
        assert [m.message.id for m in await store.read_messages("s1")] == ["m1", "m2", "u1", "a1"]
        written = await store.read_run_events("r1")
        assert [(e.seq, e.data) for e in written] == [(1, {"step": 3})]  # the second's
        plain = Commit(session_id="s1", expected_version=4, messages=(user("m2"),))
        with pytest.raises(ConflictError):
            await store.commit(plain)  # the plain commit, the same rule

    run_with(url, go)


def test_events_of_a_refused_commit_are_not_written(url: str) -> None:
    async def go(store: PostgresStore) -> None:
        run = await claimed(store)
        assert run.lease_token is not None
        carrier = RecordingCarrier()
        store.attach_carrier(carrier)
        carrier.hold("r1", run.lease_token, event(1))
        with pytest.raises(ConflictError):
            await store.commit(step(run, 5, "a1"))  # the session is at version 1
        assert await store.read_run_events("r1") == []
        assert [w for _, w in carrier.settled] == [None]  # handed back: written on their own
        assert [m.message.id for m in await store.read_messages("s1")] == ["m1"]

    run_with(url, go)


def test_a_stale_writer_writes_neither_its_step_nor_its_events(url: str) -> None:
    async def go(store: PostgresStore) -> None:
        stale = await claimed(store, owner="w1")
        assert stale.lease_token is not None
        taken = await store.claim_run("r1", owner="w2", now=1_200.0, expires_at=1_300.0)
        assert taken.lease_token == stale.lease_token + 1
        carrier = RecordingCarrier()
        store.attach_carrier(carrier)
        carrier.hold("r1", stale.lease_token, event(1))
        with pytest.raises(LeaseLostError):
            await store.commit(step(stale, 1, "a1"))
        assert await store.read_run_events("r1") == []
        assert [w for _, w in carrier.settled] == [None]
        assert [m.message.id for m in await store.read_messages("s1")] == ["m1"]
        # The new holder's events ride with its commit.
        assert taken.lease_token is not None
        carrier.hold("r1", taken.lease_token, event(2))
        await store.commit(step(taken, 1, "b1", owner="w2"))
        assert [(e.seq, e.data) for e in await store.read_run_events("r1")] == [(1, {"step": 2})]

    run_with(url, go)


def test_only_a_commit_fenced_by_a_token_takes_events_each_fenced_by_its_own(url: str) -> None:
    async def go(store: PostgresStore) -> None:
        run = await claimed(store)
        assert run.lease_token is not None
        carrier = RecordingCarrier()
        store.attach_carrier(carrier)
        carrier.hold("r1", run.lease_token, event(1))
        unfenced = Commit(session_id="s1", expected_version=1, messages=(assistant("a1"),))
        await store.commit(unfenced)
        assert carrier.asked == [] and await store.read_run_events("r1") == []
        carrier.hold("r1", run.lease_token + 5, event(2))  # under another token: fenced off
        await store.commit(step(run, 2, "a2"))
        assert await store.read_run_events("r1") == []
        assert [w for _, w in carrier.settled] == [{"r1": []}]

    run_with(url, go)


def test_listeners_are_told_once_carried_events_are_durable(url: str) -> None:
    async def go(store: PostgresStore) -> None:
        run = await claimed(store)
        assert run.lease_token is not None
        feed = PgEventFeed(url, poll_seconds=30.0)
        feed.start()
        try:
            await asyncio.wait_for(feed.connected.wait(), 10)
            carrier = RecordingCarrier()
            store.attach_carrier(carrier)
            carrier.hold("r1", run.lease_token, event(1), event(2))
            await store.commit(step(run, 1, "a1"))
            assert await feed.wait("r1", after=1, at_most=10.0)
            # A plain event write is told the same way (after its commit).
            await store.append_run_events("r1", [event(3)], lease_token=run.lease_token)
            assert await feed.wait("r1", after=2, at_most=10.0)
        finally:
            await feed.close()

    run_with(url, go)


def test_notifications_do_not_wait_for_a_flush(url: str) -> None:
    """The notifying statement turns synchronous_commit off for its own transaction only:
    the same connection's next write is durable again."""

    async def go(store: PostgresStore) -> None:

        async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
            await conn.execute("SET synchronous_commit = on")  # the test server's is off
            await service.notify(conn, payloads=["r1 1"])
            cur = await conn.execute("SHOW synchronous_commit")
            assert await cur.fetchone() == ("on",)

    run_with(url, go)


def test_a_worker_writes_most_events_inside_its_runs_commits(url: str) -> None:
    """A worker on PostgreSQL: every event written once, in emission order, numbered
    without gaps; those emitted before a step's commit ride in it (the worker's own
    writes are left the ones after a run's last commit)."""

    async def go(store: PostgresStore) -> None:
        tool = echo_tool()
        svc = AgentService.build(
            store=store,
            artifacts=store,
            model=FunctionModel(Model(), name="m"),
            tools=[tool.tool],
            clock=SystemClock(),
            ids=RandomIds(),
            owner="w1",
            lease_seconds=5.0,
        )
        runs = []
        for _ in range(3):
            session = await svc.create_session()
            runs.append(await svc.submit(session.id, "go"))
        worker = Worker(service=svc, queue=store, encode=encode_event, poll_seconds=0.01)
        stop = asyncio.Event()
        task = asyncio.create_task(worker.run(stop))
        async with asyncio.timeout(30):
            while worker.stats.finished.get("completed", 0) < 3:  # noqa: ASYNC110
                await asyncio.sleep(0.01)
        stop.set()
        await task
        written = 0
        for run in runs:
            events = await store.read_run_events(run.id)
            kinds = [e.type.value for e in events]
            assert [e.seq for e in events] == list(range(1, len(events) + 1))
            assert kinds[:2] == ["run_started", "step_started"] and kinds[-1] == "run_finished"
            assert kinds.count("step_started") == 2 and kinds.count("tool_result") == 1
            written += len(events)
        assert 0 < worker._sink.carried < written


def test_a_commit_carries_the_events_of_the_writers_other_runs(url: str) -> None:
    async def go(store: PostgresStore) -> None:
        run = await claimed(store)
        second = await claimed_second(store)
        assert run.lease_token is not None
        await store.append_run_events("r2", [event(0)], lease_token=second.lease_token)
        carrier = RecordingCarrier()
        store.attach_carrier(carrier)
        carrier.hold("r1", run.lease_token, event(1))
        carrier.hold("r2", second.lease_token, event(2), event(3))
        await store.commit(step(run, 1, "a1"))
        assert [(e.seq, e.data) for e in await store.read_run_events("r1")] == [(1, {"step": 1})]
        r2 = await store.read_run_events("r2")
        assert [(e.seq, e.data) for e in r2] == [
            (1, {"step": 0}),
            (2, {"step": 2}),
            (3, {"step": 3}),
        ]
        assert carrier.settled[0][1] == {"r1": await store.read_run_events("r1"), "r2": r2[1:]}
        # r2 claimed since by another worker: its events under the old token are dropped,
        # the commit of r1 (still r1's holder) lands.
        await store.claim_run("r2", owner="w2", now=1_200.0, expires_at=1_300.0)
        carrier.hold("r2", second.lease_token, event(4))
        await store.commit(step(run, 2, "a2"))
        assert len(await store.read_run_events("r2")) == 3
        assert carrier.settled[1][1] == {"r2": []}

    run_with(url, go)


def test_a_runs_events_in_two_slices_are_numbered_on_and_each_slice_fenced(url: str) -> None:
    """``plait_commit_events`` writes the events run by run, a slice of the arrays at a
    time (the store sends each run's together). Slices of one run apart (r1, r2, r1) are
    numbered on from the first, its result names each run once with its last number, and
    a slice under a stale token or none is left out while the others go in."""

    async def go(store: PostgresStore) -> None:
        run = await claimed(store)
        token = run.lease_token
        assert token is not None
        second = await claimed_second(store)
        await store.append_run_events("r1", [event(0)], lease_token=token)
        slices = [
            ("r1", token, "a"),
            ("r1", token, "b"),
            ("r2", second.lease_token, "c"),
            ("r1", token + 1, "stale"),  # fenced off: not the run's token
            ("r1", None, "none"),  # fenced off: no token
            ("r1", token, "d"),
            ("r2", second.lease_token, "e"),
        ]
        events = (
            Texts([r for r, _, _ in slices]),
            Texts(["step_started"] * len(slices)),
            Floats([1_000.0] * len(slices)),
            Texts([json.dumps({"tag": tag}) for _, _, tag in slices]),
            Ints([t for _, t, _ in slices]),
        )
        params = (*commit_sql._params(step(run, 1, "a1"), False), *events)
        async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
            row = await (await conn.execute(commit_sql._CALL_EVENTS, params)).fetchone()
        assert row is not None
        assert dict(zip(row[4], row[5], strict=True)) == {"r1": 4, "r2": 2}
        assert len(row[4]) == 2
        r1 = [(e.seq, e.data) for e in await store.read_run_events("r1")]
        r2 = [(e.seq, e.data) for e in await store.read_run_events("r2")]
        assert r1 == [(1, {"step": 0}), (2, {"tag": "a"}), (3, {"tag": "b"}), (4, {"tag": "d"})]
        assert r2 == [(1, {"tag": "c"}), (2, {"tag": "e"})]
        assert [m.message.id for m in await store.read_messages("s1")] == ["m1", "a1"]

    run_with(url, go)
