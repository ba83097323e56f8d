"""Approvals through the API: list, approve, deny; others' approvals do not exist."""

from __future__ import annotations

import asyncio

import pytest

from plait.adapters.stores.sqlite.store import SqliteStore
from plait.application.ports import Commit
from plait.domain.governance import Approval
from plait.domain.runs import Budget, Run, RunStatus
from plait.domain.session import Session
from plait.domain.subagents import ParentCall
from tests.http.conftest import Live
from tests.http.test_api import error, new_session, wait_terminal


def _request(live: Live, session_id: str, run_id: str, aid: str) -> None:
    async def go() -> None:
        store = SqliteStore(live.store_path)
        try:
            approval = Approval(
                id=aid, session_id=session_id, run_id=run_id, call_id=f"call-{aid}",
                tool_name="write_file", args_digest="d" * 64, scope=("notes.txt",),
                workspace_state=None, requested_at=1.0, reason="writes need a person",
            )  # fmt: skip
            await store.request_approval(approval)
        finally:
            await store.close()

    asyncio.run(go())


@pytest.mark.slow
def test_list_approve_deny_and_isolation(live: Live) -> None:
    with live.client("alice") as alice, live.client("bob") as bob:
        sid = new_session(alice)["session_id"]
        run = alice.post(f"/v1/sessions/{sid}/messages", json={"text": "hi"}).json()
        wait_terminal(alice, run["run_id"])
        _request(live, sid, run["run_id"], "apr_1")
        _request(live, sid, run["run_id"], "apr_2")
        listed = alice.get(f"/v1/sessions/{sid}/approvals").json()["approvals"]
        assert {a["approval_id"] for a in listed} == {"apr_1", "apr_2"}
        assert all(a["status"] == "pending" for a in listed)
        # Bob can neither see nor decide them.
        error(bob.get(f"/v1/sessions/{sid}/approvals"), 404, "not_found")
        error(bob.post("/v1/approvals/apr_1/approve", json={}), 404, "not_found")
        error(bob.post("/v1/approvals/apr_2/deny", json={"reason": "no"}), 404, "not_found")
        ok = alice.post("/v1/approvals/apr_1/approve", json={"ttl_seconds": 60})
        assert ok.status_code == 200, ok.text
        assert ok.json()["status"] == "approved" and ok.json()["grantor"] == "alice"
        no = alice.post("/v1/approvals/apr_2/deny", json={"reason": "not today"})
        assert no.json()["status"] == "denied" and no.json()["denial_reason"] == "not today"
        error(alice.post("/v1/approvals/apr_1/deny", json={"reason": "late"}), 409, "run_state")
        error(alice.post("/v1/approvals/apr_2/deny", json={"reason": " "}), 422, "invalid_request")
        error(alice.post("/v1/approvals/apr_404/approve", json={}), 404, "not_found")


@pytest.mark.slow
def test_a_sub_agents_request_is_listed_with_its_parent_session_and_names_it(live: Live) -> None:
    with live.client("alice") as alice:
        sid = new_session(alice)["session_id"]
        run = alice.post(f"/v1/sessions/{sid}/messages", json={"text": "hi"}).json()
        wait_terminal(alice, run["run_id"])
        link = ParentCall(session_id=sid, run_id=run["run_id"], call_id="d1", agent="counter")

        async def child() -> None:
            store = SqliteStore(live.store_path)
            try:
                owner = (await store.get_session(sid)).owner
                await store.create_session(Session(id="ses_kid", created_at=2.0, owner=owner))
                kid = Run(
                    id="run_kid",
                    session_id="ses_kid",
                    status=RunStatus.RUNNING,
                    budget=Budget(),
                    started_at=2.0,
                    parent=link,
                )
                await store.start_run(Commit(session_id="ses_kid", expected_version=0, run=kid))
            finally:
                await store.close()

        asyncio.run(child())
        _request(live, "ses_kid", "run_kid", "apr_kid")
        (listed,) = alice.get(f"/v1/sessions/{sid}/approvals").json()["approvals"]
        assert listed["approval_id"] == "apr_kid" and listed["run_id"] == "run_kid"
        assert listed["parent"] == {
            "session_id": sid,
            "run_id": run["run_id"],
            "call_id": "d1",
            "agent": "counter",
        }
