"""The contract of the service-mode ports (:class:`~plait.application.ports.RunQueue`,
:class:`~plait.application.ports.KeyStore`): memory, SQLite and PostgreSQL pass it."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from plait.application.ports import Commit
from plait.domain.errors import ConflictError
from plait.domain.runs import RunStatus
from plait.domain.service import ApiKey, EventType, NewRunEvent, Role, RunEventRecord
from tests.contract.base import ContractBase
from tests.contract.builders import lease, new_run, new_session, user


async def queue(store: Any, sid: str, rid: str, started_at: float) -> None:
    await store.create_session(new_session(sid))
    run = new_run(rid, session_id=sid, status=RunStatus.QUEUED, started_at=started_at)
    message = user(f"m-{rid}", run_id=rid)
    await store.start_run(Commit(session_id=sid, expected_version=0, run=run, messages=(message,)))


def ev(type_: EventType, **data: Any) -> NewRunEvent:
    return NewRunEvent(type=type_, at=5.0, data=data)


class ServiceContract(ContractBase):
    def test_queued_runs_are_claimed_oldest_first_and_once(self) -> None:
        async def go(store: Any) -> None:
            await queue(store, "s2", "r2", 20.0)
            await queue(store, "s1", "r1", 10.0)
            assert (await store.get_session("s1")).active_run_id == "r1"  # holds the session
            first = await store.claim_queued_run(owner="w1", now=100.0, expires_at=160.0)
            assert first.id == "r1" and first.lease == lease("w1", 160.0)
            assert first.status is RunStatus.QUEUED
            second = await store.claim_queued_run(owner="w2", now=100.0, expires_at=160.0)
            assert second.id == "r2" and second.lease.owner == "w2"
            assert await store.claim_queued_run(owner="w3", now=100.0, expires_at=160.0) is None
            # A worker that died: its lease expires and another worker takes the run.
            again = await store.claim_queued_run(owner="w3", now=170.0, expires_at=230.0)
            assert again.id == "r1" and again.lease.owner == "w3"
            assert (await store.get_run("r1")).lease == lease("w3", 230.0)

        self.run(go)

    def test_running_and_ended_runs_are_not_queued(self) -> None:
        async def go(store: Any) -> None:
            await store.create_session(new_session())
            run = new_run(lease=lease())
            await store.start_run(Commit(session_id="s1", expected_version=0, run=run))
            assert await store.claim_queued_run(owner="w", now=1e9, expires_at=2e9) is None

        self.run(go)

    def test_concurrent_claimers_never_share_a_run(self) -> None:
        async def go(store: Any, other: Any) -> None:
            for i in range(6):
                await queue(store, f"s{i}", f"r{i}", float(i))
            claims = [
                (store if i % 2 else other).claim_queued_run(
                    owner=f"w{i}", now=1.0, expires_at=99.0
                )
                for i in range(10)
            ]
            got = [r for r in await asyncio.gather(*claims) if r is not None]
            assert sorted(r.id for r in got) == [f"r{i}" for i in range(6)]

        self.run2(go)

    def test_events_are_numbered_per_run_without_gaps(self) -> None:
        async def go(store: Any) -> None:
            assert await store.read_run_events("r1") == []
            assert await store.append_run_events("r1", []) == []
            first = await store.append_run_events(
                "r1", [ev(EventType.RUN_STARTED), ev(EventType.STEP_STARTED, step=1)]
            )
            await store.append_run_events("r2", [ev(EventType.RUN_STARTED, note="其他")])
            more = await store.append_run_events("r1", [ev(EventType.RUN_FINISHED, ok=True)])
            assert [e.seq for e in first] == [1, 2] and [e.seq for e in more] == [3]
            everything = await store.read_run_events("r1")
            assert everything == [*first, *more]
            assert everything[1] == RunEventRecord(
                run_id="r1", seq=2, type=EventType.STEP_STARTED, at=5.0, data={"step": 1}
            )
            assert await store.read_run_events("r1", after=1, limit=1) == [first[1]]
            assert await store.read_run_events("r1", after=3) == []
            assert [e.data for e in await store.read_run_events("r2")] == [{"note": "其他"}]

        self.run(go)

    def test_a_batch_numbers_each_run_after_its_last_event(self) -> None:
        async def go(store: Any) -> None:
            await store.append_run_events("r1", [ev(EventType.RUN_STARTED)])
            written = await store.append_run_events_batch(
                {
                    "r1": [ev(EventType.STEP_STARTED, step=1), ev(EventType.RUN_FINISHED)],
                    "r2": [ev(EventType.RUN_STARTED, n=1)],
                    "r3": [],
                }
            )
            assert {k: [(e.seq, e.type) for e in v] for k, v in written.items()} == {
                "r1": [(2, EventType.STEP_STARTED), (3, EventType.RUN_FINISHED)],
                "r2": [(1, EventType.RUN_STARTED)],
                "r3": [],
            }
            assert await store.read_run_events("r1", after=1) == written["r1"]
            assert await store.read_run_events("r2") == written["r2"]
            assert await store.append_run_events_batch({}) == {}

        self.run(go)

    def test_concurrent_appenders_of_one_run_never_collide(self) -> None:
        async def go(store: Any, other: Any) -> None:
            writes = [
                (store if i % 2 else other).append_run_events_batch(
                    {"r1": [ev(EventType.MESSAGE, i=i, part=0), ev(EventType.MESSAGE, i=i, part=1)]}
                )
                for i in range(8)
            ]
            await asyncio.gather(*writes)
            events = await store.read_run_events("r1")
            assert [e.seq for e in events] == list(range(1, 17))
            pairs = [(e.data["i"], e.data["part"]) for e in events]
            assert sorted(pairs) == [(i, p) for i in range(8) for p in (0, 1)]
            for n in range(0, 16, 2):  # each write's events stay together and in order
                assert pairs[n][0] == pairs[n + 1][0] and pairs[n][1] == 0

        self.run2(go)

    def test_api_keys_are_found_by_hash_only(self) -> None:
        async def go(store: Any) -> None:
            key = ApiKey(
                id="key1", principal="ana", role=Role.ADMIN, key_hash="a" * 64, created_at=1.0
            )
            assert await store.find_api_key("a" * 64) is None
            await store.add_api_key(key)
            assert await store.find_api_key("a" * 64) == key
            assert await store.find_api_key("b" * 64) is None
            with pytest.raises(ConflictError):
                await store.add_api_key(key)
            other = ApiKey(
                id="key2", principal="bo", role=Role.USER, key_hash="a" * 64, created_at=2.0
            )
            with pytest.raises(ConflictError):  # same secret under another id
                await store.add_api_key(other)

        self.run(go)
