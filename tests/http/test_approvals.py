"""Approvals through the API: list, approve, deny; others' approvals do not exist."""

from __future__ import annotations

import asyncio

from plait.adapters.stores.sqlite import SqliteStore
from plait.domain.governance import Approval
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
