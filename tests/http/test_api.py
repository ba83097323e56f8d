"""The HTTP API through a real client against a live server: every endpoint, every
error code, SSE resumption, cancel while running."""

from __future__ import annotations

import time
from datetime import datetime, timedelta
from typing import Any

import httpx
import pytest

from tests.http.conftest import Live
from tests.http.sse import read_events


def wait_terminal(c: httpx.Client, run_id: str, timeout: float = 15.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        run: dict[str, Any] = c.get(f"/v1/runs/{run_id}").json()
        if run["status"] not in ("queued", "running"):
            return run
        assert time.monotonic() < deadline, run
        time.sleep(0.02)


def new_session(c: httpx.Client, **body: Any) -> dict[str, Any]:
    r = c.post("/v1/sessions", json=body)
    assert r.status_code == 201, r.text
    session: dict[str, Any] = r.json()
    return session


def error(r: httpx.Response, status: int, code: str) -> dict[str, Any]:
    assert r.status_code == status, (r.status_code, r.text)
    body = r.json()
    assert set(body) == {"error"}
    assert set(body["error"]) == {"code", "message", "details"}
    assert body["error"]["code"] == code, body
    assert body["error"]["message"]
    err: dict[str, Any] = body["error"]
    return err


@pytest.mark.slow
def test_health_ready_and_openapi(live: Live) -> None:
    with live.client(None) as c:
        assert c.get("/v1/health").json() == {"status": "ok"}
        assert c.get("/v1/ready").json() == {"status": "ready"}
        doc = c.get("/v1/openapi.json").json()
        paths = set(doc["paths"])
        assert {
            "/v1/sessions", "/v1/sessions/{session_id}", "/v1/sessions/{session_id}/messages",
            "/v1/runs/{run_id}", "/v1/runs/{run_id}/cancel", "/v1/runs/{run_id}/events",
            "/v1/sessions/{session_id}/fork", "/v1/health", "/v1/ready",
        } <= paths  # fmt: skip


@pytest.mark.slow
def test_a_message_queues_a_run_that_a_worker_completes(live: Live) -> None:
    with live.client() as c:
        s = new_session(c, title="first")
        assert s["owner"] == "alice" and s["version"] == 0
        r = c.post(f"/v1/sessions/{s['session_id']}/messages", json={"text": "tool please"})
        assert r.status_code == 202, r.text
        run = r.json()
        assert run["status"] == "queued" and run["session_id"] == s["session_id"]
        done = wait_terminal(c, run["run_id"])
        assert done["status"] == "completed", done["error"]
        assert done["usage"]["tool_calls"] == 1
        page = c.get(f"/v1/sessions/{s['session_id']}/messages").json()
        kinds = [(m["kind"], m.get("text") or m.get("content")) for m in page["messages"]]
        assert kinds == [
            ("user", "tool please"),
            ("assistant", "calling echo"),
            ("tool_result", "tool please"),
            ("assistant", "answer to tool please"),
        ]
        assert page["next_after"] is None
        shown = c.get(f"/v1/sessions/{s['session_id']}").json()
        assert shown["version"] == 4 and shown["active_run_id"] is None
        runs = c.get(f"/v1/sessions/{s['session_id']}/runs").json()["runs"]
        assert [x["run_id"] for x in runs] == [run["run_id"]]
        listed = c.get("/v1/sessions").json()["sessions"]
        assert [x["session_id"] for x in listed] == [s["session_id"]]


@pytest.mark.slow
def test_messages_page_by_seq(live: Live) -> None:
    with live.client() as c:
        s = new_session(c)
        sid = s["session_id"]
        for text in ("one", "two"):
            run = c.post(f"/v1/sessions/{sid}/messages", json={"text": text}).json()
            wait_terminal(c, run["run_id"])
        first = c.get(f"/v1/sessions/{sid}/messages", params={"limit": 3}).json()
        assert [m["seq"] for m in first["messages"]] == [1, 2, 3]
        assert first["next_after"] == 3
        rest = c.get(f"/v1/sessions/{sid}/messages", params={"after": 3, "limit": 3}).json()
        assert [m["seq"] for m in rest["messages"]] == [4] and rest["next_after"] is None


@pytest.mark.slow
def test_sse_streams_every_event_and_resumes_from_last_event_id(live: Live) -> None:
    with live.client() as c:
        sid = new_session(c)["session_id"]
        run = c.post(f"/v1/sessions/{sid}/messages", json={"text": "tool go"}).json()
        frames = read_events(c, run["run_id"])
        types = [f.event for f in frames]
        assert types[0] == "run_started" and types[-1] == "run_finished"
        for needed in ("step_started", "tool_call_requested", "decision", "tool_result",
                       "message"):  # fmt: skip
            assert needed in types, types
        ids = [int(f.id) for f in frames if f.id is not None]
        assert ids == list(range(1, len(ids) + 1))
        for f in frames:  # ISO 8601 in UTC, as every timestamp (issue 26 item 5)
            at = datetime.fromisoformat(f.data["at"])
            assert isinstance(f.data["at"], str) and at.utcoffset() == timedelta(0)
        assert frames[-1].data["run"]["status"] == "completed"
        call = next(f for f in frames if f.event == "tool_call_requested").data
        assert call["name"] == "echo" and call["arguments"] == {"text": "tool go"}
        # The gate's own decision, as recorded on the call's execution record.
        (decision,) = [f.data for f in frames if f.event == "decision"]
        assert {k: decision[k] for k in ("call_id", "name", "verdict", "decided_by")} == {
            "call_id": call["call_id"], "name": "echo", "verdict": "allow",
            "decided_by": "default",
        }  # fmt: skip
        order = [f.event for f in frames if f.event in ("decision", "tool_started")]
        assert order == ["decision", "tool_started"]
        # Resume after the third event: exactly the rest, same ids and payloads.
        rest = read_events(c, run["run_id"], last_event_id="3")
        assert [(f.id, f.event, f.data) for f in rest] == [
            (f.id, f.event, f.data) for f in frames[3:]
        ]
        # A client that disconnected mid-stream resumes where it left off.
        head = read_events(c, run["run_id"], stop_after=2)
        tail = read_events(c, run["run_id"], last_event_id=head[-1].id)
        assert [f.id for f in head + tail] == [f.id for f in frames]
        again = c.get(f"/v1/runs/{run['run_id']}/events", params={"after": len(frames)})
        assert again.status_code == 200


@pytest.mark.slow
def test_streamed_text_arrives_as_text_deltas(live: Live) -> None:
    with live.client() as c:
        sid = new_session(c)["session_id"]
        run = c.post(f"/v1/sessions/{sid}/messages", json={"text": "stream it"}).json()
        frames = read_events(c, run["run_id"])
        deltas = [f.data["text"] for f in frames if f.event == "text_delta"]
        assert deltas == ["str", "eam", "ed"]
        step = next(i for i, f in enumerate(frames) if f.event == "step_started")
        first_delta = next(i for i, f in enumerate(frames) if f.event == "text_delta")
        assert step < first_delta


@pytest.mark.slow
def test_cancel_while_running_and_session_busy(live: Live) -> None:
    with live.client() as c:
        sid = new_session(c)["session_id"]
        run = c.post(f"/v1/sessions/{sid}/messages", json={"text": "slow one"}).json()
        deadline = time.monotonic() + 10
        while c.get(f"/v1/runs/{run['run_id']}").json()["status"] != "running":
            assert time.monotonic() < deadline
            time.sleep(0.02)
        busy = c.post(f"/v1/sessions/{sid}/messages", json={"text": "another"})
        err = error(busy, 409, "session_busy")
        assert err["details"]["active_run_id"] == run["run_id"]
        assert c.post(f"/v1/runs/{run['run_id']}/cancel").status_code == 200
        done = wait_terminal(c, run["run_id"])
        assert done["status"] == "cancelled"
        frames = read_events(c, run["run_id"])
        assert frames[-1].event == "run_finished"
        assert frames[-1].data["run"]["status"] == "cancelled"
        # Cancelling an ended run changes nothing; the session takes messages again.
        assert c.post(f"/v1/runs/{run['run_id']}/cancel").json()["status"] == "cancelled"
        after = c.post(f"/v1/sessions/{sid}/messages", json={"text": "hello"})
        assert after.status_code == 202
        assert wait_terminal(c, after.json()["run_id"])["status"] == "completed"


@pytest.mark.slow
def test_errors_have_one_shape_and_stable_codes(live: Live) -> None:
    with live.client(None) as anon:
        error(anon.get("/v1/sessions"), 401, "unauthorized")
        bad = anon.get("/v1/sessions", headers={"Authorization": "Bearer plk_nope"})
        error(bad, 401, "unauthorized")
        error(anon.get("/v1/nowhere"), 404, "not_found")
        error(anon.put("/v1/health"), 405, "method_not_allowed")
    with live.client() as c:
        error(c.get("/v1/sessions/ses_missing"), 404, "not_found")
        error(c.get("/v1/runs/run_missing"), 404, "not_found")
        error(c.post("/v1/runs/run_missing/cancel"), 404, "not_found")
        error(c.get("/v1/runs/run_missing/events"), 404, "not_found")
        error(c.post("/v1/sessions/ses_missing/messages", json={"text": "x"}), 404, "not_found")
        sid = new_session(c)["session_id"]
        error(c.post(f"/v1/sessions/{sid}/messages", json={"text": "  "}), 422, "invalid_request")
        error(c.post(f"/v1/sessions/{sid}/messages", json={}), 422, "invalid_request")
        extra = c.post(f"/v1/sessions/{sid}/messages", json={"text": "x", "sudo": True})
        error(extra, 422, "invalid_request")
        error(c.post("/v1/sessions", content=b"{not json"), 422, "invalid_request")
        error(c.get("/v1/sessions", params={"limit": 0}), 422, "invalid_request")
        big = c.post(f"/v1/sessions/{sid}/messages", json={"text": "x" * 5000})
        error(big, 413, "payload_too_large")
        ws = c.post("/v1/sessions", json={"workspace": "proj"})
        assert "PLAIT_WORKSPACE_ROOT" in error(ws, 400, "invalid_value")["message"]
        error(c.post("/v1/sessions", json={"workspace": "../etc"}), 422, "invalid_request")
        lei = c.get(f"/v1/runs/{_a_run(c, sid)}/events", headers={"Last-Event-ID": "abc"})
        error(lei, 422, "invalid_request")
        fork = {"through_message_id": "nope", "request_id": "r1"}
        error(c.post(f"/v1/sessions/{sid}/fork", json=fork), 404, "not_found")


def _a_run(c: httpx.Client, sid: str) -> str:
    run = c.post(f"/v1/sessions/{sid}/messages", json={"text": "hi"}).json()
    wait_terminal(c, run["run_id"])
    return str(run["run_id"])


@pytest.mark.slow
def test_fork_through_the_api(live: Live) -> None:
    with live.client() as c:
        sid = new_session(c)["session_id"]
        run = c.post(f"/v1/sessions/{sid}/messages", json={"text": "tool a"}).json()
        wait_terminal(c, run["run_id"])
        messages = c.get(f"/v1/sessions/{sid}/messages").json()["messages"]
        inside = messages[1]["message_id"]  # the assistant turn whose call is answered later
        cut = {"through_message_id": inside, "request_id": "f0"}
        error(c.post(f"/v1/sessions/{sid}/fork", json=cut), 422, "invalid_cut_point")
        body = {"through_message_id": messages[2]["message_id"], "request_id": "f1"}
        branch = c.post(f"/v1/sessions/{sid}/fork", json=body)
        assert branch.status_code == 201, branch.text
        b = branch.json()
        assert b["owner"] == "alice" and b["version"] == 3
        assert b["fork_origin"]["parent_session_id"] == sid
        same = c.post(f"/v1/sessions/{sid}/fork", json=body).json()
        assert same["session_id"] == b["session_id"]
        # The same request id for a different fork point is a conflict, not a new branch.
        other = {"through_message_id": messages[3]["message_id"], "request_id": "f1"}
        err = error(c.post(f"/v1/sessions/{sid}/fork", json=other), 409, "conflict")
        assert "new request id" in err["message"]
