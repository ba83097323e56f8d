"""The read side the CLI goes through (Queries) and the write side of approvals: what a
store offers, and what a store without the ability answers instead."""

from __future__ import annotations

from dataclasses import replace

import pytest

from plait.adapters.stores.memory.store import MemoryStore
from plait.application.governance.approvals import Approvals
from plait.application.ports import Commit, StoreCapabilities
from plait.application.queries import Queries
from plait.domain.errors import ApprovalNotFoundError, ConfigError, RunStateError
from plait.domain.governance import Approval, ApprovalStatus
from plait.domain.messages import UserMessage
from plait.domain.runs import Budget, Run, RunStatus
from plait.domain.session import Session
from plait.domain.summary import Constraint
from plait.testing import FixedClock

from .conftest import run

NOW = 1_700_000_000.0


class PlainStore:
    """Only the SessionStore methods a Queries needs: no forks, summaries or approvals."""

    capabilities = StoreCapabilities()

    def __init__(self, inner: MemoryStore) -> None:
        self.get_session = inner.get_session
        self.read_messages = inner.read_messages
        self.list_sessions = inner.list_sessions


async def _session_with_messages(store: MemoryStore, texts: list[str]) -> str:
    await store.create_session(Session(id="ses_1", created_at=NOW))
    run_ = Run(
        id="run_1", session_id="ses_1", status=RunStatus.COMPLETED, budget=Budget(), started_at=NOW
    )
    messages = tuple(
        UserMessage(id=f"msg_{i}", text=t, created_at=NOW) for i, t in enumerate(texts, 1)
    )
    await store.start_run(
        Commit(session_id="ses_1", expected_version=0, messages=messages, run=run_)
    )
    return "ses_1"


def _pending(id: str, *, run_id: str = "run_1", at: float = NOW) -> Approval:
    return Approval(
        id=id,
        session_id="ses_1",
        run_id=run_id,
        call_id=f"call_{id}",
        tool_name="edit_file",
        args_digest="d",
        scope=("a.txt",),
        workspace_state=None,
        requested_at=at,
        reason="the policy asks a person",
    )


def _queries(store: object) -> Queries:
    return Queries(store=store, artifacts=MemoryStore(), clock=FixedClock(NOW))  # type: ignore[arg-type]


def test_messages_by_number_and_by_id() -> None:
    async def go() -> None:
        store = MemoryStore()
        sid = await _session_with_messages(store, ["one", "two", "three"])
        q = _queries(store)
        second = await q.message_numbered(sid, 2)
        assert second is not None
        assert (second.seq, second.message.id) == (2, "msg_2")
        assert await q.message_numbered(sid, 0) is None
        assert await q.message_numbered(sid, 4) is None
        assert await q.message_seq(sid, "msg_3") == 3
        assert await q.message_seq(sid, "msg_9") is None

    run(go())


def test_abilities_a_store_lacks_read_as_nothing() -> None:
    async def go() -> None:
        inner = MemoryStore()
        sid = await _session_with_messages(inner, ["one"])
        q = _queries(PlainStore(inner))
        assert await q.message_seq(sid, "msg_1") is None  # no index of ids without forks
        assert await q.list_summaries(sid) == []
        assert await q.list_constraints(sid) == []
        assert await q.list_approvals(session_id=sid) == []
        assert await q.fork_record(sid) is None

    run(go())


def test_summaries_constraints_and_approvals_come_from_the_store() -> None:
    async def go() -> None:
        store = MemoryStore()
        sid = await _session_with_messages(store, ["keep tests green"])
        rule = Constraint(text="keep tests green", source_message_id="msg_1")
        await store.add_constraints(sid, [rule])
        await store.request_approval(_pending("apr_1", at=NOW))
        await store.request_approval(_pending("apr_2", run_id="run_2", at=NOW + 1))
        q = _queries(store)
        assert await q.list_constraints(sid) == [rule]
        assert await q.list_summaries(sid) == []
        assert [a.id for a in await q.list_approvals(session_id=sid)] == ["apr_2", "apr_1"]
        assert [a.id for a in await q.list_approvals(run_id="run_1")] == ["apr_1"]

    run(go())


def test_approve_and_deny_at_the_clock_time() -> None:
    async def go() -> None:
        store = MemoryStore()
        await _session_with_messages(store, ["hi"])
        await store.request_approval(_pending("apr_1"))
        await store.request_approval(_pending("apr_2"))
        desk = Approvals(store, FixedClock(NOW + 5))
        ok = await desk.approve("apr_1", grantor="ana", ttl_seconds=60)
        assert ok == replace(
            _pending("apr_1"),
            status=ApprovalStatus.APPROVED,
            grantor="ana",
            decided_at=NOW + 5,
            expires_at=NOW + 65,
        )
        no = await desk.deny("apr_2", grantor="ana", reason="not on a Friday")
        assert (no.status, no.denial_reason, no.decided_at) == (
            ApprovalStatus.DENIED,
            "not on a Friday",
            NOW + 5,
        )
        with pytest.raises(RunStateError):  # only a pending request can be decided
            await desk.deny("apr_1", grantor="ana", reason="changed my mind")
        with pytest.raises(ApprovalNotFoundError):
            await desk.approve("apr_9", grantor="ana", ttl_seconds=60)

    run(go())


def test_a_store_without_approvals_says_so() -> None:
    desk = Approvals(PlainStore(MemoryStore()), FixedClock(NOW))  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="keeps no approvals"):
        run(desk.approve("apr_1", grantor="ana", ttl_seconds=60))
