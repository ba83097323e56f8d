"""The contract every store adapter passes (SessionStore + ArtifactStore).

Subclass :class:`StoreContract`, implement :meth:`create_store` and, when the backend can
be opened twice, :meth:`second_handle` (another handle on the same data, as another
process would have). Tests are plain sync methods that drive the store with
``asyncio.run``.
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable
from dataclasses import replace
from pathlib import Path

import pytest

from plait.adapters.stores import Store
from plait.application.ports import Commit, CommitResult
from plait.domain.errors import (
    ArtifactNotFoundError,
    ConfigError,
    ConflictError,
    LeaseLostError,
    PlaitError,
    RunNotFoundError,
    SessionBusyError,
    SessionNotFoundError,
)
from plait.domain.messages import Message
from plait.domain.runs import Lease, RunError, RunStatus
from plait.domain.session import ExecutionState, ForkOrigin, StoredMessage
from tests.contract.builders import (
    assistant,
    execution,
    lease,
    mixed_history,
    new_run,
    new_session,
    user,
)

Scenario = Callable[[Store], Awaitable[None]]
Scenario2 = Callable[[Store, Store], Awaitable[None]]


async def _started(store: Store, *messages: Message, owner: str | None = None) -> CommitResult:
    """Session s1 with run r1 started (and leased to ``owner`` when given)."""
    await store.create_session(new_session())
    run = new_run(lease=None if owner is None else lease(owner))
    return await store.start_run(
        Commit(session_id="s1", expected_version=0, run=run, messages=messages)
    )


def _stored(*messages: Message, first: int = 1) -> list[StoredMessage]:
    return [StoredMessage(first + i, m) for i, m in enumerate(messages)]


class StoreContract(ABC):
    tmp_path: Path

    @pytest.fixture(autouse=True)
    def _tmp(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path

    @abstractmethod
    def create_store(self) -> Store:
        """A fresh, empty store (may use ``self.tmp_path``)."""

    def second_handle(self) -> Store | None:
        """Another handle on the store last created, or None if the backend has no such
        thing (memory)."""
        return None

    def run(self, scenario: Scenario) -> None:
        async def main() -> None:
            store = self.create_store()
            try:
                await scenario(store)
            finally:
                await store.close()

        asyncio.run(main())

    def run2(self, scenario: Scenario2) -> None:
        async def main() -> None:
            a = self.create_store()
            b = self.second_handle()
            if b is None:
                await a.close()
                pytest.skip("this store has no second handle")
            try:
                await scenario(a, b)
            finally:
                await b.close()
                await a.close()

        asyncio.run(main())

    # --- sessions -------------------------------------------------------------------------

    def test_create_and_get_session(self) -> None:
        async def go(store: Store) -> None:
            s = new_session(
                "s-full",
                owner="ana",
                workspace="/ws",
                title="Café ☕",
                fork_origin=ForkOrigin(parent_session_id="p", fork_point_message_id="m9"),
            )
            await store.create_session(s)
            assert await store.get_session("s-full") == s
            await store.create_session(new_session("s-bare"))
            assert await store.get_session("s-bare") == new_session("s-bare")

        self.run(go)

    def test_duplicate_session_conflicts(self) -> None:
        async def go(store: Store) -> None:
            await store.create_session(new_session())
            with pytest.raises(ConflictError):
                await store.create_session(new_session(title="again"))
            assert await store.get_session("s1") == new_session()

        self.run(go)

    def test_new_session_must_be_empty(self) -> None:
        async def go(store: Store) -> None:
            with pytest.raises(ConfigError):
                await store.create_session(new_session(version=3))
            with pytest.raises(SessionNotFoundError):
                await store.get_session("s1")

        self.run(go)

    def test_unknown_session(self) -> None:
        async def go(store: Store) -> None:
            with pytest.raises(SessionNotFoundError) as info:
                await store.get_session("nope")
            assert info.value.details["session_id"] == "nope"
            with pytest.raises(SessionNotFoundError):
                await store.read_messages("nope")
            with pytest.raises(SessionNotFoundError):
                await store.commit(
                    Commit(session_id="nope", expected_version=0, messages=(user("m1"),))
                )
            with pytest.raises(SessionNotFoundError):
                await store.start_run(
                    Commit(session_id="nope", expected_version=0, run=new_run(session_id="nope"))
                )
            with pytest.raises(SessionNotFoundError):
                await store.list_runs(session_id="nope")

        self.run(go)

    def test_list_sessions_newest_first(self) -> None:
        async def go(store: Store) -> None:
            assert await store.list_sessions() == []
            for i, t in enumerate([5.0, 9.0, 1.0, 7.0]):
                await store.create_session(new_session(f"s{i}", created_at=t))
            ids = [s.id for s in await store.list_sessions()]
            assert ids == ["s1", "s3", "s0", "s2"]
            assert [s.id for s in await store.list_sessions(limit=2)] == ["s1", "s3"]

        self.run(go)

    # --- messages -------------------------------------------------------------------------

    def test_messages_round_trip_exactly(self) -> None:
        async def go(store: Store) -> None:
            history = mixed_history()
            await store.create_session(new_session())
            r = await store.commit(
                Commit(session_id="s1", expected_version=0, messages=tuple(history[:3]))
            )
            assert r == CommitResult(3, False)
            r = await store.commit(
                Commit(session_id="s1", expected_version=3, messages=tuple(history[3:]))
            )
            assert r.version == len(history)
            assert await store.read_messages("s1") == _stored(*history)
            assert (await store.get_session("s1")).version == len(history)

        self.run(go)

    def test_read_after_and_limit(self) -> None:
        async def go(store: Store) -> None:
            msgs = [user(f"m{i}", text=str(i)) for i in range(1, 8)]
            await store.create_session(new_session())
            version = 0
            for m in msgs:
                version = (
                    await store.commit(
                        Commit(session_id="s1", expected_version=version, messages=(m,))
                    )
                ).version
            assert version == 7
            assert await store.read_messages("s1", after=3) == _stored(*msgs[3:], first=4)
            assert await store.read_messages("s1", after=2, limit=2) == _stored(*msgs[2:4], first=3)
            assert await store.read_messages("s1", after=7) == []
            assert await store.read_messages("s1", limit=0) == []

        self.run(go)

    def test_version_conflict_applies_nothing(self) -> None:
        async def go(store: Store) -> None:
            await _started(store, user("m1"), owner="w")
            before = (await store.get_run("r1"), await store.read_messages("s1"))
            bad = Commit(
                session_id="s1",
                expected_version=0,
                lease_owner="w",
                messages=(assistant("m2", ("c1", "read_file", {"path": "a.txt"})),),
                run=replace(new_run(lease=lease("w")), status=RunStatus.COMPLETED),
                executions=(execution("c1"),),
            )
            with pytest.raises(ConflictError) as info:
                await store.commit(bad)
            assert not isinstance(info.value, SessionBusyError | LeaseLostError)
            assert info.value.details["expected"] == 0
            assert info.value.details["actual"] == 1
            assert (await store.get_run("r1"), await store.read_messages("s1")) == before
            assert await store.get_executions("r1") == []
            session = await store.get_session("s1")
            assert (session.version, session.active_run_id) == (1, "r1")

        self.run(go)

    def test_empty_commit_checks_version_and_keeps_it(self) -> None:
        async def go(store: Store) -> None:
            await _started(store, user("m1"))
            r = await store.commit(
                Commit(session_id="s1", expected_version=1, executions=(execution("c1"),))
            )
            assert r.version == 1
            with pytest.raises(ConflictError):
                await store.commit(Commit(session_id="s1", expected_version=0))
            assert (await store.get_session("s1")).version == 1

        self.run(go)

    def test_duplicate_message_id_conflicts(self) -> None:
        async def go(store: Store) -> None:
            await _started(store, user("m1"))
            with pytest.raises(ConflictError):
                await store.commit(
                    Commit(
                        session_id="s1",
                        expected_version=1,
                        messages=(user("m2"), user("m1", text="x")),
                    )
                )
            with pytest.raises(ConflictError):
                await store.commit(
                    Commit(session_id="s1", expected_version=1, messages=(user("m3"), user("m3")))
                )
            assert await store.read_messages("s1") == _stored(user("m1"))
            assert (await store.get_session("s1")).version == 1

        self.run(go)

    # --- runs -----------------------------------------------------------------------------

    def test_start_run_claims_session(self) -> None:
        async def go(store: Store) -> None:
            r = await _started(store, user("m1"))
            assert r == CommitResult(1, False)
            assert (await store.get_session("s1")).active_run_id == "r1"
            assert await store.get_run("r1") == new_run()
            assert await store.read_messages("s1") == _stored(user("m1"))

        self.run(go)

    def test_start_run_busy_writes_nothing(self) -> None:
        async def go(store: Store) -> None:
            await _started(store, user("m1"))
            second = Commit(
                session_id="s1", expected_version=1, run=new_run("r2"), messages=(user("m2"),)
            )
            with pytest.raises(SessionBusyError) as info:
                await store.start_run(second)
            assert info.value.details == {"session_id": "s1", "active_run_id": "r1"}
            with pytest.raises(RunNotFoundError):
                await store.get_run("r2")
            assert await store.read_messages("s1") == _stored(user("m1"))
            assert [r.id for r in await store.list_runs()] == ["r1"]

        self.run(go)

    def test_start_run_duplicate_and_conflicts(self) -> None:
        async def go(store: Store) -> None:
            await _started(store)
            await store.create_session(new_session("s2"))
            with pytest.raises(ConflictError):
                await store.start_run(
                    Commit(session_id="s2", expected_version=0, run=new_run("r1", session_id="s2"))
                )
            with pytest.raises(ConflictError):
                await store.start_run(
                    Commit(session_id="s2", expected_version=4, run=new_run("r2", session_id="s2"))
                )
            with pytest.raises(ConfigError):
                await store.start_run(Commit(session_id="s2", expected_version=0))
            with pytest.raises(ConfigError):
                await store.start_run(
                    Commit(session_id="s2", expected_version=0, run=new_run("r3", session_id="s1"))
                )
            assert (await store.get_session("s2")).active_run_id is None
            assert await store.list_runs(session_id="s2") == []

        self.run(go)

    def test_commit_replaces_run_state(self) -> None:
        async def go(store: Store) -> None:
            await _started(store)
            updated = new_run(model="m-2").with_usage(steps=3, model_calls=4, input_tokens=9)
            r = await store.commit(Commit(session_id="s1", expected_version=0, run=updated))
            assert r == CommitResult(0, False)
            assert await store.get_run("r1") == updated
            assert (await store.get_session("s1")).active_run_id == "r1"

        self.run(go)

    def test_terminal_run_releases_session(self) -> None:
        async def go(store: Store) -> None:
            await _started(store, user("m1"), owner="w")
            done = new_run(lease=lease("w")).ended(
                RunStatus.FAILED, 1_010.0, RunError(code="boom", message="it broke")
            )
            await store.commit(
                Commit(session_id="s1", expected_version=1, run=done, lease_owner="w")
            )
            assert await store.get_run("r1") == done
            assert (await store.get_session("s1")).active_run_id is None
            r = await store.start_run(
                Commit(
                    session_id="s1",
                    expected_version=1,
                    run=new_run("r2", started_at=1_020.0),
                    messages=(user("m2"),),
                )
            )
            assert r.version == 2
            assert (await store.get_session("s1")).active_run_id == "r2"

        self.run(go)

    def test_commit_unknown_run_applies_nothing(self) -> None:
        async def go(store: Store) -> None:
            await _started(store)
            with pytest.raises(RunNotFoundError):
                await store.commit(
                    Commit(
                        session_id="s1",
                        expected_version=0,
                        run=new_run("ghost"),
                        messages=(user("m1"),),
                    )
                )
            with pytest.raises(ConfigError):
                await store.commit(
                    Commit(session_id="s1", expected_version=0, run=new_run(session_id="other"))
                )
            assert await store.read_messages("s1") == []

        self.run(go)

    def test_commit_is_fenced_by_lease(self) -> None:
        async def go(store: Store) -> None:
            await _started(store, owner="w1")
            stolen = Commit(
                session_id="s1",
                expected_version=0,
                lease_owner="w2",
                run=new_run(model="x"),
                messages=(user("m1"),),
                executions=(execution("c1"),),
            )
            with pytest.raises(LeaseLostError):
                await store.commit(stolen)
            with pytest.raises(LeaseLostError):
                await store.commit(replace(stolen, lease_owner=None))
            assert await store.get_run("r1") == new_run(lease=lease("w1"))
            assert await store.read_messages("s1") == []
            assert await store.get_executions("r1") == []
            ok = await store.commit(
                replace(stolen, lease_owner="w1", run=new_run(model="x", lease=lease("w1")))
            )
            assert ok.version == 1

        self.run(go)

    def test_commit_keeps_renewed_lease_and_can_release(self) -> None:
        async def go(store: Store) -> None:
            await _started(store, owner="w")
            await store.renew_lease("r1", owner="w", expires_at=5_000.0)
            stale = new_run(model="y", lease=lease("w", 2_000.0))
            await store.commit(
                Commit(session_id="s1", expected_version=0, run=stale, lease_owner="w")
            )
            assert (await store.get_run("r1")).lease == Lease(owner="w", expires_at=5_000.0)
            await store.commit(
                Commit(
                    session_id="s1",
                    expected_version=0,
                    lease_owner="w",
                    run=replace(stale, lease=None),
                )
            )
            assert (await store.get_run("r1")).lease is None

        self.run(go)

    def test_list_runs_newest_first(self) -> None:
        async def go(store: Store) -> None:
            for sid in ("s1", "s2"):
                await store.create_session(new_session(sid))
            version = {"s1": 0, "s2": 0}
            for rid, sid, t in [("a", "s1", 3.0), ("b", "s2", 5.0), ("c", "s1", 4.0)]:
                await store.start_run(
                    Commit(
                        session_id=sid,
                        expected_version=version[sid],
                        run=new_run(rid, session_id=sid, started_at=t),
                    )
                )
                done = new_run(rid, session_id=sid, started_at=t).ended(
                    RunStatus.COMPLETED, t + 0.5
                )
                await store.commit(Commit(session_id=sid, expected_version=version[sid], run=done))
            assert [r.id for r in await store.list_runs()] == ["b", "c", "a"]
            assert [r.id for r in await store.list_runs(session_id="s1")] == ["c", "a"]
            with pytest.raises(RunNotFoundError) as info:
                await store.get_run("zzz")
            assert info.value.details["run_id"] == "zzz"

        self.run(go)

    def test_request_cancel(self) -> None:
        async def go(store: Store) -> None:
            await _started(store)
            run = await store.request_cancel("r1")
            assert run == new_run(cancel_requested=True)
            assert await store.get_run("r1") == run
            r = await store.commit(
                Commit(
                    session_id="s1",
                    expected_version=0,
                    run=new_run(model="z"),
                    messages=(user("m1"),),
                )
            )
            assert r == CommitResult(1, True)
            assert (await store.get_run("r1")).cancel_requested
            r = await store.commit(
                Commit(session_id="s1", expected_version=1, messages=(user("m2"),))
            )
            assert r == CommitResult(2, True)  # the session's active run is cancelled
            with pytest.raises(RunNotFoundError):
                await store.request_cancel("nope")

        self.run(go)

    # --- execution records ----------------------------------------------------------------

    def test_executions_upsert_forward(self) -> None:
        async def go(store: Store) -> None:
            await _started(store)
            recs = [execution("c2"), execution("c1")]
            await store.commit(Commit(session_id="s1", expected_version=0, executions=tuple(recs)))
            assert await store.get_executions("r1") == recs
            started = replace(recs[1], state=ExecutionState.STARTED, started_at=1_005.0)
            await store.commit(Commit(session_id="s1", expected_version=0, executions=(started,)))
            await store.commit(
                Commit(session_id="s1", expected_version=0, executions=(started,))
            )  # same state: fine
            assert await store.get_executions("r1") == [recs[0], started]
            with pytest.raises(ConflictError):
                await store.commit(
                    Commit(
                        session_id="s1",
                        expected_version=0,
                        executions=(replace(started, state=ExecutionState.REVIEWED),),
                    )
                )
            assert await store.get_executions("r1") == [recs[0], started]

        self.run(go)

    def test_execution_key_reuse_applies_nothing(self) -> None:
        async def go(store: Store) -> None:
            await _started(store)
            await store.commit(
                Commit(session_id="s1", expected_version=0, executions=(execution("c1"),))
            )
            other = execution("c1", arguments='{"path":"b.txt"}', state=ExecutionState.STARTED)
            with pytest.raises(ConflictError, match="different arguments"):
                await store.commit(
                    Commit(
                        session_id="s1",
                        expected_version=0,
                        messages=(user("m1"),),
                        run=new_run(model="q"),
                        executions=(execution("c0"), other),
                    )
                )
            assert await store.get_executions("r1") == [execution("c1")]
            assert await store.read_messages("s1") == []
            assert await store.get_run("r1") == new_run()

        self.run(go)

    def test_execution_for_unknown_run(self) -> None:
        async def go(store: Store) -> None:
            await _started(store)
            with pytest.raises(RunNotFoundError):
                await store.commit(
                    Commit(
                        session_id="s1",
                        expected_version=0,
                        executions=(execution("c1", run_id="ghost"),),
                    )
                )
            with pytest.raises(RunNotFoundError):
                await store.get_executions("ghost")
            with pytest.raises(ConfigError):
                await store.commit(
                    Commit(
                        session_id="s1",
                        expected_version=0,
                        executions=(execution("c1", session_id="s9"),),
                    )
                )

        self.run(go)

    def test_start_run_with_executions(self) -> None:
        async def go(store: Store) -> None:
            await store.create_session(new_session())
            rec = execution("c1")
            await store.start_run(
                Commit(session_id="s1", expected_version=0, run=new_run(), executions=(rec,))
            )
            assert await store.get_executions("r1") == [rec]

        self.run(go)

    # --- leases ---------------------------------------------------------------------------

    def test_claim_run(self) -> None:
        async def go(store: Store) -> None:
            await _started(store)
            run = await store.claim_run("r1", owner="a", now=100.0, expires_at=130.0)
            assert run.lease == Lease(owner="a", expires_at=130.0)
            assert await store.get_run("r1") == run
            with pytest.raises(LeaseLostError) as info:
                await store.claim_run("r1", owner="b", now=120.0, expires_at=150.0)
            assert info.value.details["owner"] == "a"
            assert info.value.details["expires_at"] == 130.0
            again = await store.claim_run("r1", owner="a", now=120.0, expires_at=160.0)
            assert again.lease == Lease(owner="a", expires_at=160.0)
            taken = await store.claim_run("r1", owner="b", now=160.0, expires_at=190.0)
            assert taken.lease == Lease(owner="b", expires_at=190.0)
            with pytest.raises(RunNotFoundError):
                await store.claim_run("nope", owner="a", now=0.0, expires_at=1.0)

        self.run(go)

    def test_claim_terminal_run_fails(self) -> None:
        async def go(store: Store) -> None:
            await _started(store)
            await store.commit(
                Commit(
                    session_id="s1",
                    expected_version=0,
                    run=new_run().ended(RunStatus.COMPLETED, 5.0),
                )
            )
            with pytest.raises(LeaseLostError):
                await store.claim_run("r1", owner="a", now=100.0, expires_at=130.0)

        self.run(go)

    def test_renew_lease(self) -> None:
        async def go(store: Store) -> None:
            await _started(store)
            with pytest.raises(LeaseLostError):
                await store.renew_lease("r1", owner="a", expires_at=10.0)
            await store.claim_run("r1", owner="a", now=0.0, expires_at=10.0)
            await store.renew_lease("r1", owner="a", expires_at=20.0)
            assert (await store.get_run("r1")).lease == Lease(owner="a", expires_at=20.0)
            with pytest.raises(LeaseLostError):
                await store.renew_lease("r1", owner="b", expires_at=30.0)
            with pytest.raises(RunNotFoundError):
                await store.renew_lease("nope", owner="a", expires_at=30.0)
            assert (await store.get_run("r1")).lease == Lease(owner="a", expires_at=20.0)

        self.run(go)

    def test_list_stale_runs(self) -> None:
        async def go(store: Store) -> None:
            for sid, rid in [("s1", "free"), ("s2", "live"), ("s3", "expired"), ("s4", "done")]:
                await store.create_session(new_session(sid))
                await store.start_run(
                    Commit(session_id=sid, expected_version=0, run=new_run(rid, session_id=sid))
                )
            await store.claim_run("live", owner="a", now=0.0, expires_at=200.0)
            await store.claim_run("expired", owner="a", now=0.0, expires_at=50.0)
            await store.commit(
                Commit(
                    session_id="s4",
                    expected_version=0,
                    run=new_run("done", session_id="s4").ended(RunStatus.CANCELLED, 9.0),
                )
            )
            stale = await store.list_stale_runs(now=100.0)
            assert sorted(r.id for r in stale) == ["expired", "free"]
            assert sorted(r.id for r in await store.list_stale_runs(now=50.0)) == [
                "expired",
                "free",
            ]

        self.run(go)

    # --- artifacts ------------------------------------------------------------------------

    def test_artifacts_are_content_addressed(self) -> None:
        async def go(store: Store) -> None:
            data = bytes(range(256)) * 40
            ref = await store.put_artifact(data, media_type="application/octet-stream")
            assert (ref.size, ref.media_type) == (len(data), "application/octet-stream")
            assert await store.put_artifact(data, media_type="application/octet-stream") == ref
            assert await store.get_artifact(ref.id) == (ref, data)
            text = await store.put_artifact(data, media_type="text/plain")
            assert text.id != ref.id
            assert text.sha256 == ref.sha256
            empty = await store.put_artifact(b"", media_type="text/plain")
            assert await store.get_artifact(empty.id) == (empty, b"")
            with pytest.raises(ArtifactNotFoundError):
                await store.get_artifact("art_missing")

        self.run(go)

    # --- lifecycle ------------------------------------------------------------------------

    def test_close_is_idempotent_and_final(self) -> None:
        async def go() -> None:
            store = self.create_store()
            await store.create_session(new_session())
            await store.close()
            await store.close()
            with pytest.raises(PlaitError):
                await store.get_session("s1")
            with pytest.raises(PlaitError):
                await store.commit(Commit(session_id="s1", expected_version=0))
            with pytest.raises(PlaitError):
                await store.put_artifact(b"x", media_type="text/plain")

        asyncio.run(go())

    # --- two handles on the same data -----------------------------------------------------

    def test_second_handle_sees_writes_and_conflicts(self) -> None:
        async def go(a: Store, b: Store) -> None:
            await a.create_session(new_session())
            assert await b.get_session("s1") == new_session()
            await a.start_run(
                Commit(session_id="s1", expected_version=0, run=new_run(), messages=(user("m1"),))
            )
            assert await b.read_messages("s1") == _stored(user("m1"))
            await b.commit(Commit(session_id="s1", expected_version=1, messages=(user("m2"),)))
            with pytest.raises(ConflictError) as info:
                await a.commit(Commit(session_id="s1", expected_version=1, messages=(user("m3"),)))
            assert info.value.details["actual"] == 2
            with pytest.raises(SessionBusyError):
                await b.start_run(Commit(session_id="s1", expected_version=2, run=new_run("r2")))
            assert await a.read_messages("s1") == _stored(user("m1"), user("m2"))

        self.run2(go)

    def test_second_handle_leases_and_cancel(self) -> None:
        async def go(a: Store, b: Store) -> None:
            await _started(a)
            await a.claim_run("r1", owner="a", now=0.0, expires_at=100.0)
            with pytest.raises(LeaseLostError):
                await b.claim_run("r1", owner="b", now=50.0, expires_at=150.0)
            await b.request_cancel("r1")
            r = await a.commit(
                Commit(
                    session_id="s1",
                    expected_version=0,
                    lease_owner="a",
                    run=new_run(lease=lease("a", 100.0)),
                )
            )
            assert r.cancel_requested
            await b.claim_run("r1", owner="b", now=100.0, expires_at=150.0)
            with pytest.raises(LeaseLostError):
                await a.commit(
                    Commit(
                        session_id="s1",
                        expected_version=0,
                        lease_owner="a",
                        run=new_run(lease=lease("a", 100.0)),
                    )
                )
            ref = await a.put_artifact(b"blob", media_type="text/plain")
            assert await b.get_artifact(ref.id) == (ref, b"blob")
            assert [x.id for x in await b.list_runs()] == ["r1"]

        self.run2(go)
