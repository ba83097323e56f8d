"""The contract for runs, execution records and leases (part of :class:`StoreContract`)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from plait.adapters.stores import Store
from plait.application.ports import Commit, CommitResult
from plait.domain.errors import (
    ConfigError,
    ConflictError,
    LeaseLostError,
    RunNotFoundError,
    SessionBusyError,
)
from plait.domain.runs import Lease, RunError, RunStatus
from plait.domain.session import ExecutionState
from tests.contract.base import ContractBase, started, stored
from tests.contract.builders import (
    execution,
    lease,
    new_run,
    new_session,
    user,
)

FOUR_RUNS = [("s1", "free"), ("s2", "live"), ("s3", "expired"), ("s4", "done")]


async def _one_run_per_session(store: Store, pairs: list[tuple[str, str]]) -> None:
    """Sessions ``sid``, each with one queued run ``rid``."""
    for sid, rid in pairs:
        await store.create_session(new_session(sid))
        run = new_run(rid, session_id=sid)
        await store.start_run(Commit(session_id=sid, expected_version=0, run=run))


class RunContract(ContractBase):
    # --- runs -----------------------------------------------------------------------------

    def test_start_run_claims_session(self) -> None:
        async def go(store: Store) -> None:
            r = await started(store, user("m1"))
            assert r == CommitResult(1, False)
            assert (await store.get_session("s1")).active_run_id == "r1"
            assert await store.get_run("r1") == new_run()
            assert await store.read_messages("s1") == stored(user("m1"))

        self.run(go)

    def test_start_run_busy_writes_nothing(self) -> None:
        async def go(store: Store) -> None:
            await started(store, user("m1"))
            second = Commit(
                session_id="s1", expected_version=1, run=new_run("r2"), messages=(user("m2"),)
            )
            with pytest.raises(SessionBusyError) as info:
                await store.start_run(second)
            assert info.value.details == {"session_id": "s1", "active_run_id": "r1"}
            with pytest.raises(RunNotFoundError):
                await store.get_run("r2")
            assert await store.read_messages("s1") == stored(user("m1"))
            assert [r.id for r in await store.list_runs()] == ["r1"]

        self.run(go)

    def test_start_run_duplicate_and_conflicts(self) -> None:
        async def go(store: Store) -> None:
            await started(store)
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
            await started(store)
            updated = new_run(model="m-2").with_usage(steps=3, model_calls=4, input_tokens=9)
            r = await store.commit(Commit(session_id="s1", expected_version=0, run=updated))
            assert r == CommitResult(0, False)
            assert await store.get_run("r1") == updated
            assert (await store.get_session("s1")).active_run_id == "r1"

        self.run(go)

    def test_terminal_run_releases_session(self) -> None:
        async def go(store: Store) -> None:
            await started(store, user("m1"), owner="w")
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
            await started(store)
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
            await started(store, owner="w1")
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
            await started(store, owner="w")
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
            await started(store)
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
            await started(store)
            recs = [execution("c2"), execution("c1")]
            await store.commit(Commit(session_id="s1", expected_version=0, executions=tuple(recs)))
            assert await store.get_executions("r1") == recs
            began = replace(recs[1], state=ExecutionState.STARTED, started_at=1_005.0)
            await store.commit(Commit(session_id="s1", expected_version=0, executions=(began,)))
            await store.commit(
                Commit(session_id="s1", expected_version=0, executions=(began,))
            )  # same state: fine
            assert await store.get_executions("r1") == [recs[0], began]
            with pytest.raises(ConflictError):
                await store.commit(
                    Commit(
                        session_id="s1",
                        expected_version=0,
                        executions=(replace(began, state=ExecutionState.REVIEWED),),
                    )
                )
            assert await store.get_executions("r1") == [recs[0], began]

        self.run(go)

    def test_executions_read_in_the_order_first_written(self) -> None:
        """Not in call-id order, and a record moved forward keeps its place: by the run's
        own commits, by a write without its state, and by another run's commit."""

        async def go(store: Store) -> None:
            await started(store)
            first = (execution("c9"), execution("c5"))
            await store.commit(Commit(session_id="s1", expected_version=0, executions=first))
            run = await store.get_run("r1")
            moved = replace(first[0], state=ExecutionState.STARTED, started_at=1_005.0)
            await store.commit(
                Commit(
                    session_id="s1",
                    expected_version=0,
                    run=run,
                    executions=(execution("c7"), moved),
                )
            )
            await store.commit(
                Commit(
                    session_id="s1",
                    expected_version=0,
                    run=run.ended(RunStatus.COMPLETED, 1_006.0),
                    executions=(execution("c6"),),
                )
            )
            second = new_run("r2", started_at=1_010.0)
            await store.start_run(Commit(session_id="s1", expected_version=0, run=second))
            await store.commit(
                Commit(
                    session_id="s1",
                    expected_version=0,
                    run=second,
                    executions=(
                        execution("b2", run_id="r2"),
                        execution("c3"),
                        execution("b1", run_id="r2"),
                    ),
                )
            )
            r1 = await store.get_executions("r1")
            assert [e.call_id for e in r1] == ["c9", "c5", "c7", "c6", "c3"]
            assert r1[0] == moved
            r2 = await store.get_executions("r2")
            assert [e.call_id for e in r2] == ["b2", "b1"]

        self.run(go)

    def test_execution_key_reuse_applies_nothing(self) -> None:
        async def go(store: Store) -> None:
            await started(store)
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
            await started(store)
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
            rec = execution("c1", decision_reason="policy: read-only", note="n ✓")
            await store.start_run(
                Commit(session_id="s1", expected_version=0, run=new_run(), executions=(rec,))
            )
            assert await store.get_executions("r1") == [rec]

        self.run(go)

    # --- leases ---------------------------------------------------------------------------

    def test_claim_run(self) -> None:
        async def go(store: Store) -> None:
            await started(store)
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
            await started(store)
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
            await started(store)
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
            await _one_run_per_session(store, FOUR_RUNS)
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

    def test_list_leased_runs(self) -> None:
        """The runs whose lease is live, with their owners: what list_stale_runs leaves
        out, terminal runs aside."""

        async def go(store: Store) -> None:
            await _one_run_per_session(store, FOUR_RUNS)
            await store.claim_run("live", owner="a", now=0.0, expires_at=200.0)
            await store.claim_run("expired", owner="b", now=0.0, expires_at=50.0)
            held = await store.claim_run("done", owner="c", now=0.0, expires_at=200.0)
            done = replace(held.ended(RunStatus.CANCELLED, 9.0), lease=held.lease)
            await store.commit(
                Commit(session_id="s4", expected_version=0, run=done, lease_owner="c")
            )
            leased = await store.list_leased_runs(now=100.0)
            assert [(r.id, r.lease.owner if r.lease else None) for r in leased] == [("live", "a")]
            earlier = await store.list_leased_runs(now=10.0)
            assert sorted(r.id for r in earlier) == ["expired", "live"]
            assert await store.list_leased_runs(now=200.0) == []  # expired at 200 itself
            running = await store.list_leased_runs(now=10.0, status=RunStatus.RUNNING)
            assert sorted(r.id for r in running) == ["expired", "live"]
            assert await store.list_leased_runs(now=10.0, status=RunStatus.QUEUED) == []

        self.run(go)

    def test_list_stale_runs_of_one_status(self) -> None:
        """A worker's sweep asks for stale ``running`` runs only: a queued run without a
        lease (claimed, not recovered) is not read."""

        async def go(store: Store) -> None:
            runs = [("s1", "queued", RunStatus.QUEUED), ("s2", "running", RunStatus.RUNNING)]
            for sid, rid, status in runs:
                await store.create_session(new_session(sid))
                await store.start_run(
                    Commit(
                        session_id=sid,
                        expected_version=0,
                        run=new_run(rid, session_id=sid, status=status),
                    )
                )
            await store.create_session(new_session("s3"))
            await store.start_run(
                Commit(session_id="s3", expected_version=0, run=new_run("held", session_id="s3"))
            )
            await store.claim_run("held", owner="a", now=0.0, expires_at=200.0)
            everything = await store.list_stale_runs(now=100.0)
            assert sorted(r.id for r in everything) == ["queued", "running"]
            running = await store.list_stale_runs(now=100.0, status=RunStatus.RUNNING)
            assert [r.id for r in running] == ["running"]
            queued = await store.list_stale_runs(now=100.0, status=RunStatus.QUEUED)
            assert [r.id for r in queued] == ["queued"]

        self.run(go)
