"""Fencing by lease token (issue 20 item 1), part of :class:`StoreContract`: every claim
makes a run's token one higher, and every write of the run that carries an older token
(or is for a run that has ended) is refused with nothing written, whatever the run's
lease looks like now."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from plait.adapters.stores import Store
from plait.application.ports import Commit
from plait.domain.errors import LeaseLostError
from plait.domain.governance import Approval
from plait.domain.runs import RunStatus
from plait.domain.service import EventType, NewRunEvent
from plait.domain.session import ExecutionState
from tests.contract.base import ContractBase, started, stored
from tests.contract.builders import execution, lease, new_run, new_session, user


def _result_commit(token: int, *, owner: str = "w1", version: int = 1) -> Commit:
    """A stale holder's tool result: a message and its settled record, no run state."""
    return Commit(
        session_id="s1",
        expected_version=version,
        messages=(user("m-late"),),
        executions=(execution("c1", state=ExecutionState.SETTLED),),
        lease_owner=owner,
        lease_token=token,
        lease_run_id="r1",
    )


def _approval(id: str = "apr1") -> Approval:
    return Approval(
        id=id, session_id="s1", run_id="r1", call_id="c1", tool_name="write_file",
        args_digest="sha256:" + "a" * 64, scope=("a.txt",), workspace_state=None,
        requested_at=1_010.0, reason="needs approval",
    )  # fmt: skip


async def _taken_over(store: Store) -> tuple[int, int]:
    """Run r1 leased to w1 (its claim's token), then taken over by w2 once w1's lease
    expired (w2's token). The session holds one message."""
    await started(store, user("m1"), owner="w1")
    first = await store.claim_run("r1", owner="w1", now=1_500.0, expires_at=2_000.0)
    second = await store.claim_run("r1", owner="w2", now=2_500.0, expires_at=3_000.0)
    assert second.lease_token == first.lease_token + 1
    return first.lease_token, second.lease_token


class FenceContract(ContractBase):
    def test_every_claim_makes_a_new_token(self) -> None:
        async def go(store: Store) -> None:
            await started(store, owner="w1")
            assert (await store.get_run("r1")).lease_token == 0
            a = await store.claim_run("r1", owner="w1", now=1_500.0, expires_at=2_000.0)
            b = await store.claim_run("r1", owner="w1", now=1_500.0, expires_at=2_000.0)
            assert (a.lease_token, b.lease_token) == (1, 2)
            assert (await store.get_run("r1")).lease_token == 2
            # A commit never moves the token, whatever its run says.
            await store.commit(
                Commit(
                    session_id="s1", expected_version=0, lease_owner="w1", lease_token=2,
                    run=replace(b, model="m", lease_token=7),
                )
            )  # fmt: skip
            assert (await store.get_run("r1")).lease_token == 2

        self.run(go)

    def test_stale_holder_commit_after_take_over_writes_nothing(self) -> None:
        async def go(store: Store) -> None:
            old, new = await _taken_over(store)
            stale_run = replace(await store.get_run("r1"), lease=lease("w1"), lease_token=old)
            with pytest.raises(LeaseLostError, match="taken over"):
                await store.commit(
                    replace(_result_commit(old), run=replace(stale_run, status=RunStatus.COMPLETED))
                )
            with pytest.raises(LeaseLostError, match="taken over"):
                await store.commit(_result_commit(old))
            assert await store.read_messages("s1") == stored(user("m1"))
            assert await store.get_executions("r1") == []
            run = await store.get_run("r1")
            assert run.status is RunStatus.RUNNING and run.lease == lease("w2", 3_000.0)
            # The new holder writes.
            assert (await store.commit(_result_commit(new, owner="w2"))).version == 2

        self.run(go)

    def test_stale_holder_behind_the_new_holders_messages_is_told_its_lease_was_lost(
        self,
    ) -> None:
        """The new holder appended before the stale one woke: the stale commit's version
        is behind as well, and it is refused for its lease (what the stale process must
        stop for), not as a version conflict (another writer of its own run)."""

        async def go(store: Store) -> None:
            old, new = await _taken_over(store)
            assert (await store.commit(_result_commit(new, owner="w2"))).version == 2
            stale_run = replace(await store.get_run("r1"), lease=lease("w1"), lease_token=old)
            with pytest.raises(LeaseLostError, match="taken over"):
                await store.commit(_result_commit(old))
            with pytest.raises(LeaseLostError, match="taken over"):
                await store.commit(replace(_result_commit(old), run=stale_run))
            assert [m.message.id for m in await store.read_messages("s1")] == ["m1", "m-late"]
            run = await store.get_run("r1")
            assert run.status is RunStatus.RUNNING and run.lease == lease("w2", 3_000.0)

        self.run(go)

    def test_stale_holder_commit_after_the_run_was_released_writes_nothing(self) -> None:
        """The attack: the new holder's recovery made the run wait for a person and
        released its lease; the old holder's result must still be refused."""

        async def go(store: Store) -> None:
            old, new = await _taken_over(store)
            waiting = replace(
                await store.get_run("r1"), status=RunStatus.AWAITING_RESOLUTION, lease=None
            )
            await store.commit(
                Commit(
                    session_id="s1", expected_version=1, run=waiting, lease_owner="w2",
                    lease_token=new, executions=(execution("c1"),),
                )
            )  # fmt: skip
            assert (await store.get_run("r1")).lease is None
            settled = _result_commit(old)
            with pytest.raises(LeaseLostError):
                await store.commit(settled)
            with pytest.raises(LeaseLostError):
                await store.commit(
                    replace(
                        settled, run=replace(waiting, status=RunStatus.RUNNING, lease_token=old)
                    )
                )
            assert await store.read_messages("s1") == stored(user("m1"))
            assert (await store.get_executions("r1")) == [execution("c1")]
            assert (await store.get_run("r1")).status is RunStatus.AWAITING_RESOLUTION
            with pytest.raises(LeaseLostError):
                await store.renew_lease("r1", owner="w1", expires_at=9_000.0, lease_token=old)

        self.run(go)

    def test_a_reclaim_by_the_same_owner_fences_its_older_claim(self) -> None:
        async def go(store: Store) -> None:
            await started(store, user("m1"), owner="w1")
            first = await store.claim_run("r1", owner="w1", now=1_500.0, expires_at=2_000.0)
            second = await store.claim_run("r1", owner="w1", now=1_500.0, expires_at=2_100.0)
            with pytest.raises(LeaseLostError):
                await store.renew_lease(
                    "r1", owner="w1", expires_at=2_200.0, lease_token=first.lease_token
                )
            with pytest.raises(LeaseLostError):
                await store.commit(_result_commit(first.lease_token))
            assert await store.read_messages("s1") == stored(user("m1"))
            assert (await store.get_run("r1")).lease == lease("w1", 2_100.0)
            await store.renew_lease(
                "r1", owner="w1", expires_at=2_200.0, lease_token=second.lease_token
            )
            assert (await store.get_run("r1")).lease == lease("w1", 2_200.0)
            assert (await store.commit(_result_commit(second.lease_token))).version == 2

        self.run(go)

    def test_a_holder_cannot_write_to_its_run_once_it_has_ended(self) -> None:
        async def go(store: Store) -> None:
            await started(store, user("m1"), owner="w1")
            claimed = await store.claim_run("r1", owner="w1", now=1_500.0, expires_at=2_000.0)
            token = claimed.lease_token
            ended = claimed.ended(RunStatus.CANCELLED, 1_600.0)
            await store.commit(
                Commit(
                    session_id="s1", expected_version=1, run=ended, lease_owner="w1",
                    lease_token=token,
                )
            )  # fmt: skip
            with pytest.raises(LeaseLostError, match="ended"):
                await store.commit(_result_commit(token))
            with pytest.raises(LeaseLostError, match="ended"):
                await store.commit(replace(_result_commit(token), run=replace(claimed, lease=None)))
            assert (await store.get_run("r1")).status is RunStatus.CANCELLED
            assert await store.read_messages("s1") == stored(user("m1"))

        self.run(go)

    def test_a_stale_approval_request_writes_nothing(self) -> None:
        async def go(store: Store) -> None:
            old, new = await _taken_over(store)
            with pytest.raises(LeaseLostError):
                await store.request_approval(_approval(), lease_token=old)
            assert await store.list_approvals(run_id="r1") == []
            written = await store.request_approval(_approval("apr2"), lease_token=new)
            assert [a.id for a in await store.list_approvals(run_id="r1")] == [written.id]

        self.run(go)

    def test_stale_run_events_are_not_written(self) -> None:
        async def go(store: Any) -> None:
            if not store.capabilities.run_queue:
                pytest.skip("this store keeps no run events")
            old, new = await _taken_over(store)
            await store.create_session(new_session("s2"))
            other = new_run("r2", session_id="s2", lease=lease("w1"))
            await store.start_run(Commit(session_id="s2", expected_version=0, run=other))
            event = NewRunEvent(type=EventType.STEP_STARTED, at=5.0, data={"step": 1})
            with pytest.raises(LeaseLostError):
                await store.append_run_events("r1", [event], lease_token=old)
            written = await store.append_run_events_batch(
                {"r1": [event, event], "r2": [event]}, lease_tokens={"r1": old, "r2": 0}
            )
            assert written["r1"] == [] and [e.seq for e in written["r2"]] == [1]
            assert await store.read_run_events("r1") == []
            done = await store.append_run_events("r1", [event], lease_token=new)
            assert [e.seq for e in done] == [1]

        self.run(go)
