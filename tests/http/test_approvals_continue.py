"""Deciding an approval over HTTP continues the run: the run goes back to the queue and
the server's worker carries it on (approved: the call runs; denied: the model reads the
denial). Someone else's approval does not exist for you."""

from __future__ import annotations

import time
from typing import Any

import httpx
import pytest

from tests.http.conftest import Live
from tests.http.test_api import error, new_session, wait_terminal


def _waiting(c: httpx.Client, text: str) -> tuple[str, str, dict[str, Any]]:
    """A session whose run waits for approval of its echo call: (session, run, approval)."""
    sid = new_session(c)["session_id"]
    run = c.post(f"/v1/sessions/{sid}/messages", json={"text": text}).json()
    waiting = wait_terminal(c, run["run_id"])
    assert waiting["status"] == "awaiting_approval", waiting
    (approval,) = c.get(f"/v1/sessions/{sid}/approvals").json()["approvals"]
    assert approval["status"] == "pending" and approval["tool_name"] == "echo"
    return sid, run["run_id"], approval


def _settled(c: httpx.Client, run_id: str, timeout: float = 15.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        run: dict[str, Any] = c.get(f"/v1/runs/{run_id}").json()
        if run["status"] not in ("queued", "running", "awaiting_approval"):
            return run
        assert time.monotonic() < deadline, run
        time.sleep(0.02)


def _messages(c: httpx.Client, sid: str) -> list[tuple[str, Any, Any]]:
    page = c.get(f"/v1/sessions/{sid}/messages").json()["messages"]
    return [(m["kind"], m.get("text") or m.get("content"), m.get("status")) for m in page]


@pytest.mark.slow
def test_approving_the_last_pending_approval_runs_the_call_and_finishes(gated: Live) -> None:
    with gated.client("alice") as c:
        sid, run_id, approval = _waiting(c, "tool approve me")
        ok = c.post(f"/v1/approvals/{approval['approval_id']}/approve", json={})
        assert ok.status_code == 200, ok.text
        assert ok.json()["status"] == "approved"
        done = _settled(c, run_id)
        assert done["status"] == "completed", done
        assert done["usage"]["tool_calls"] == 1
        assert _messages(c, sid) == [
            ("user", "tool approve me", None),
            ("assistant", "calling echo", None),
            ("tool_result", "tool approve me", "succeeded"),
            ("assistant", "answer to tool approve me", None),
        ]
        (used,) = c.get(f"/v1/sessions/{sid}/approvals").json()["approvals"]
        assert used["status"] == "consumed" and used["consumed_by"] is not None
        assert c.get(f"/v1/sessions/{sid}").json()["active_run_id"] is None
        # Deciding it again changes nothing and says why.
        again = c.post(f"/v1/approvals/{approval['approval_id']}/approve", json={})
        error(again, 409, "run_state")


@pytest.mark.slow
def test_denying_settles_the_call_as_denied_and_the_model_reads_it(gated: Live) -> None:
    with gated.client("alice") as c:
        sid, run_id, approval = _waiting(c, "tool deny me")
        no = c.post(f"/v1/approvals/{approval['approval_id']}/deny", json={"reason": "not now"})
        assert no.status_code == 200, no.text
        done = _settled(c, run_id)
        assert done["status"] == "completed", done
        kinds = _messages(c, sid)
        assert [k[0] for k in kinds] == ["user", "assistant", "tool_result", "assistant"]
        assert kinds[2][2] == "denied" and "not now" in kinds[2][1]
        said = kinds[3][1]
        assert (
            said.startswith("understood, not doing it: ")
            and "denied by user:alice: not now" in said
        )


@pytest.mark.slow
def test_someone_elses_approval_is_not_found_and_stays_pending(gated: Live) -> None:
    with gated.client("alice") as alice, gated.client("bob") as bob:
        sid, run_id, approval = _waiting(alice, "tool mine")
        aid = approval["approval_id"]
        error(bob.post(f"/v1/approvals/{aid}/approve", json={}), 404, "not_found")
        error(bob.post(f"/v1/approvals/{aid}/deny", json={"reason": "x"}), 404, "not_found")
        error(bob.get(f"/v1/sessions/{sid}/approvals"), 404, "not_found")
        (still,) = alice.get(f"/v1/sessions/{sid}/approvals").json()["approvals"]
        assert still["status"] == "pending"
        assert alice.get(f"/v1/runs/{run_id}").json()["status"] == "awaiting_approval"


@pytest.mark.slow
def test_the_sse_stream_of_a_continued_run_resumes_after_the_wait(gated: Live) -> None:
    from tests.http.sse import read_events

    with gated.client("alice") as c:
        _, run_id, approval = _waiting(c, "tool stream")
        before = read_events(c, run_id)
        assert before[-1].event == "run_finished"
        assert before[-1].data["run"]["status"] == "awaiting_approval"
        c.post(f"/v1/approvals/{approval['approval_id']}/approve", json={})
        _settled(c, run_id)
        after = read_events(c, run_id, last_event_id=before[-1].id)
        assert after[-1].event == "run_finished"
        assert after[-1].data["run"]["status"] == "completed"
        assert "tool_result" in [f.event for f in after]
        decisions = [
            (f.data["verdict"], f.data["decided_by"]) for f in before + after
            if f.event == "decision"
        ]  # fmt: skip
        assert decisions == [("needs_approval", "policy:rules.ask-echo"), ("allow", "user:alice")]


@pytest.mark.slow
def test_a_denial_is_streamed_as_the_gates_decision(gated: Live) -> None:
    from tests.http.sse import read_events

    with gated.client("alice") as c:
        _, run_id, approval = _waiting(c, "tool no")
        c.post(f"/v1/approvals/{approval['approval_id']}/deny", json={"reason": "no way"})
        _settled(c, run_id)
        waited = read_events(c, run_id)  # ends at the wait
        frames = waited + read_events(c, run_id, last_event_id=waited[-1].id)
        (denied,) = [
            f.data for f in frames if f.event == "decision" and f.data["verdict"] == "deny"
        ]
        assert denied["decided_by"] == "user:alice" and "no way" in denied["reason"]
        results = [f.data["status"] for f in frames if f.event == "tool_result"]
        assert results == ["denied"]


@pytest.mark.slow
def test_approve_and_deny_continue_runs_on_postgresql(gated_pg: Live) -> None:
    with gated_pg.client("alice") as c, gated_pg.client("bob") as bob:
        sid, run_id, approval = _waiting(c, "tool on pg")
        error(
            bob.post(f"/v1/approvals/{approval['approval_id']}/approve", json={}), 404, "not_found"
        )
        assert (
            c.post(f"/v1/approvals/{approval['approval_id']}/approve", json={}).status_code == 200
        )
        assert _settled(c, run_id)["status"] == "completed"
        assert [k[2] for k in _messages(c, sid)] == [None, None, "succeeded", None]
        sid2, run2, approval2 = _waiting(c, "tool deny on pg")
        c.post(f"/v1/approvals/{approval2['approval_id']}/deny", json={"reason": "no"})
        assert _settled(c, run2)["status"] == "completed"
        assert [k[2] for k in _messages(c, sid2)] == [None, None, "denied", None]
