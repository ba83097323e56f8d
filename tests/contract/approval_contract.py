"""The approval rules every store keeps (ApprovalStore): pending requests, decisions,
binding to the exact call, expiry, consumption exactly once, no authority across
sessions (forks included)."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any

import pytest

from plait.adapters.stores import Store
from plait.application.ports import Commit
from plait.domain.errors import (
    ApprovalNotFoundError,
    ApprovalRefusedError,
    RunNotFoundError,
    RunStateError,
    SessionNotFoundError,
)
from plait.domain.governance import Approval, ApprovalStatus, ApprovalUse
from plait.domain.runs import RunStatus
from plait.domain.session import ForkOrigin
from tests.contract.base import ContractBase, started
from tests.contract.builders import new_run, new_session

DIGEST_A = "sha256:" + "a" * 64
DIGEST_B = "sha256:" + "b" * 64


def pending(
    id: str = "apr1", *, call_id: str = "c1", session_id: str = "s1", **kw: Any
) -> Approval:
    fields: dict[str, Any] = dict(
        id=id,
        session_id=session_id,
        run_id="r1",
        call_id=call_id,
        tool_name="write_file",
        args_digest=DIGEST_A,
        scope=("deploy/app.yaml",),
        workspace_state="sha256:ws1",
        requested_at=1_010.0,
        reason="rule protected: deploy/app.yaml is protected",
    )
    fields.update(kw)
    return Approval(**fields)


def use(**kw: Any) -> ApprovalUse:
    fields: dict[str, Any] = dict(
        session_id="s1",
        call_id="c1",
        tool_name="write_file",
        args_digest=DIGEST_A,
        scope=("deploy/app.yaml",),
        workspace_state="sha256:ws1",
        now=1_100.0,
    )
    fields.update(kw)
    return ApprovalUse(**fields)


class ApprovalContract(ContractBase):
    def test_request_list_and_get(self) -> None:
        async def go(store: Store) -> None:
            await started(store)
            a = await store.request_approval(pending())
            assert a == pending()
            assert await store.get_approval("apr1") == a
            # the same call asking again (e.g. after a restart) gets the same request
            assert await store.request_approval(pending("apr2")) == a
            other = await store.request_approval(
                pending("apr3", call_id="c2", requested_at=1_020.0)
            )
            assert await store.list_approvals() == [other, a]
            assert await store.list_approvals(session_id="s1", run_id="r1") == [other, a]
            assert await store.list_approvals(session_id="nope") == []
            with pytest.raises(ApprovalNotFoundError):
                await store.get_approval("apr2")

        self.run(go)

    def test_request_needs_an_existing_session(self) -> None:
        async def go(store: Store) -> None:
            with pytest.raises(SessionNotFoundError):
                await store.request_approval(pending(session_id="ghost"))
            assert await store.list_approvals() == []

        self.run(go)

    def test_approve_with_ttl_then_consume_exactly_once(self) -> None:
        async def go(store: Store) -> None:
            await started(store)
            await store.request_approval(pending())
            ok = await store.decide_approval(
                "apr1", approve=True, grantor="ana", at=1_050.0, ttl_seconds=600
            )
            assert ok == replace(
                pending(),
                status=ApprovalStatus.APPROVED,
                grantor="ana",
                decided_at=1_050.0,
                expires_at=1_650.0,
            )
            with pytest.raises(RunStateError):
                await store.decide_approval(
                    "apr1", approve=False, grantor="bob", at=1_060.0, reason="no"
                )
            used = await store.consume_approval("apr1", use())
            assert used.consumed_by == "c1" and used.consumed_at == 1_100.0
            # the same call again (a restart after consuming): unchanged, still authorized
            assert await store.consume_approval("apr1", use(now=1_200.0)) == used
            # any other call: refused, and the record is unchanged
            with pytest.raises(ApprovalRefusedError, match="call"):
                await store.consume_approval("apr1", use(call_id="c9"))
            assert await store.get_approval("apr1") == used

        self.run(go)

    def test_binding_to_arguments_scope_state_session_and_expiry(self) -> None:
        async def go(store: Store) -> None:
            await started(store)
            await store.request_approval(pending())
            await store.decide_approval(
                "apr1", approve=True, grantor="ana", at=1_050.0, ttl_seconds=100
            )
            for wrong, what in (
                (use(args_digest=DIGEST_B), "arguments"),
                (use(tool_name="edit_file"), "tool"),
                (use(scope=("deploy/other.yaml",)), "resource scope"),
                (use(workspace_state="sha256:ws2"), "workspace state"),
                (use(session_id="s2"), "session"),
                (use(now=1_150.0), "expired"),
            ):
                with pytest.raises(ApprovalRefusedError, match=what):
                    await store.consume_approval("apr1", wrong)
            assert (await store.get_approval("apr1")).consumed_by is None

        self.run(go)

    def test_deny_needs_a_reason_and_authorizes_nothing(self) -> None:
        async def go(store: Store) -> None:
            await started(store)
            await store.request_approval(pending())
            with pytest.raises(RunStateError, match="reason"):
                await store.decide_approval(
                    "apr1", approve=False, grantor="ana", at=1_050.0, reason=" "
                )
            with pytest.raises(RunStateError, match="ttl"):
                await store.decide_approval("apr1", approve=True, grantor="ana", at=1_050.0)
            denied = await store.decide_approval(
                "apr1", approve=False, grantor="ana", at=1_050.0, reason="not now"
            )
            assert denied.status is ApprovalStatus.DENIED and denied.denial_reason == "not now"
            with pytest.raises(ApprovalRefusedError, match="denied"):
                await store.consume_approval("apr1", use())
            with pytest.raises(RunStateError):
                await store.decide_approval(
                    "apr1", approve=True, grantor="ana", at=1_060.0, ttl_seconds=60
                )
            with pytest.raises(ApprovalNotFoundError):
                await store.decide_approval(
                    "nope", approve=True, grantor="ana", at=1.0, ttl_seconds=60
                )
            with pytest.raises(ApprovalRefusedError, match="pending"):
                await store.consume_approval(
                    (await store.request_approval(pending("apr2", call_id="c2"))).id,
                    use(call_id="c2"),
                )

        self.run(go)

    def test_a_fork_inherits_no_approval(self) -> None:
        async def go(store: Store) -> None:
            await started(store)
            await store.create_session(
                new_session(
                    "s2", fork_origin=ForkOrigin(parent_session_id="s1", fork_point_message_id="m1")
                )
            )
            await store.request_approval(pending())
            await store.decide_approval(
                "apr1", approve=True, grantor="ana", at=1_050.0, ttl_seconds=600
            )
            with pytest.raises(ApprovalRefusedError, match="session"):
                await store.consume_approval("apr1", use(session_id="s2"))
            assert await store.list_approvals(session_id="s2") == []

        self.run(go)

    def test_consumption_is_durable_and_exclusive_across_handles(self) -> None:
        async def go(a: Store, b: Store) -> None:
            await started(a)
            await a.request_approval(pending())
            await b.decide_approval(
                "apr1", approve=True, grantor="ana", at=1_050.0, ttl_seconds=600
            )
            results = await asyncio.gather(
                a.consume_approval("apr1", use(call_id="c1")),
                b.consume_approval("apr1", use(call_id="c1", now=1_101.0)),
                return_exceptions=True,
            )
            assert all(isinstance(r, Approval) for r in results)
            first = await a.get_approval("apr1")
            assert await b.get_approval("apr1") == first and first.consumed_by == "c1"
            with pytest.raises(ApprovalRefusedError):
                await b.consume_approval("apr1", use(call_id="c2"))

        self.run2(go)


async def _waiting(store: Store, sid: str, owner: str, at: float, status: RunStatus) -> None:
    await store.create_session(new_session(sid, created_at=at, owner=owner))
    run = new_run(f"r-{sid}", session_id=sid, started_at=at, status=status)
    await store.start_run(Commit(session_id=sid, expected_version=0, run=run))


class InboxContract(ContractBase):
    """What waits for a person across sessions, newest first, a page at a time, one
    owner's or everyone's (the stores that serve the API)."""

    def test_pending_approvals_across_sessions_paged_by_owner(self) -> None:
        async def go(store: Store) -> None:
            inbox: Any = store
            for n, owner in enumerate(("ana", "bob", "ana", "ana")):
                sid = f"s{n}"
                await _waiting(store, sid, owner, 1_000.0 + n, RunStatus.AWAITING_APPROVAL)
                await store.request_approval(
                    pending(f"apr{n}", session_id=sid, run_id=f"r-{sid}", requested_at=1_010.0)
                )  # equal times: the later-stored first
            ids = [a.id for a in await inbox.list_pending_approvals(owner="ana")]
            assert ids == ["apr3", "apr2", "apr0"]
            first = await inbox.list_pending_approvals(owner="ana", limit=2)
            assert [a.id for a in first] == ["apr3", "apr2"]
            # the cursor holds once it is decided (it left the inbox meanwhile)
            await store.decide_approval(
                "apr2", approve=False, grantor="ana", at=1_020.0, reason="no"
            )
            rest = await inbox.list_pending_approvals(owner="ana", before="apr2", limit=2)
            assert [a.id for a in rest] == ["apr0"]
            everyone = await inbox.list_pending_approvals()
            assert [a.id for a in everyone] == ["apr3", "apr1", "apr0"]
            assert await inbox.list_pending_approvals(owner="cy") == []
            with pytest.raises(ApprovalNotFoundError):
                await inbox.list_pending_approvals(before="apr-none")

        self.run(go)

    def test_waiting_runs_by_status_paged_by_owner(self) -> None:
        async def go(store: Store) -> None:
            inbox: Any = store
            statuses = [RunStatus.AWAITING_RESOLUTION, RunStatus.AWAITING_APPROVAL]
            for n, owner in enumerate(("ana", "bob", "ana", "ana", "ana")):
                status = statuses[1] if n == 3 else statuses[0]
                await _waiting(store, f"s{n}", owner, 1_000.0 + n, status)
            await _waiting(store, "s9", "ana", 1_100.0, RunStatus.RUNNING)
            waiting = RunStatus.AWAITING_RESOLUTION
            ids = [r.id for r in await inbox.list_waiting_runs(waiting, owner="ana")]
            assert ids == ["r-s4", "r-s2", "r-s0"]
            page = await inbox.list_waiting_runs(waiting, owner="ana", before="r-s4", limit=1)
            assert [r.id for r in page] == ["r-s2"]
            everyone = await inbox.list_waiting_runs(waiting)
            assert [r.id for r in everyone] == ["r-s4", "r-s2", "r-s1", "r-s0"]
            asked = await inbox.list_waiting_runs(RunStatus.AWAITING_APPROVAL)
            assert [r.id for r in asked] == ["r-s3"]
            with pytest.raises(RunNotFoundError):
                await inbox.list_waiting_runs(waiting, before="r-none")
            with pytest.raises(ValueError, match="only waiting runs"):
                await inbox.list_waiting_runs(RunStatus.RUNNING)

        self.run(go)
