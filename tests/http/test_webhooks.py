"""Webhooks over the HTTP API: a principal registers an endpoint for its own sessions'
events and reads its deliveries; another principal neither gets those events nor sees
the endpoint; bad input is a clear 400. The in-process worker of ``plait serve`` sends."""

from __future__ import annotations

import time
from typing import Any, get_args

import httpx
import pytest

from plait.domain.webhooks import EVENT_TYPES
from plait.entrypoints.http.webhooks import EventName
from tests.http.conftest import Live
from tests.http.test_api import error, new_session, wait_terminal
from tests.webhooks.receiver import Receiver


def _add(c: httpx.Client, url: str, **extra: Any) -> dict[str, Any]:
    r = c.post("/v1/webhooks", json={"url": url, "events": ["run.finished"], **extra})
    assert r.status_code == 201, r.text
    body: dict[str, Any] = r.json()
    return body


def _delivered(c: httpx.Client, webhook_id: str) -> list[dict[str, Any]]:
    deadline = time.monotonic() + 30
    while True:
        r = c.get(f"/v1/webhooks/{webhook_id}/deliveries")
        assert r.status_code == 200, r.text
        found: list[dict[str, Any]] = r.json()["deliveries"]
        if found and all(d["status"] == "delivered" for d in found):
            return found
        assert time.monotonic() < deadline, found
        time.sleep(0.05)


@pytest.mark.slow
def test_a_principal_gets_its_own_runs_finished_signed(live: Live) -> None:
    alice_hook, bob_hook = Receiver(), Receiver()
    try:
        with live.client("alice") as alice, live.client("bob") as bob:
            mine = _add(alice, alice_hook.url, principal="bob")  # ignored: not an admin
            assert mine["principal"] == "alice" and mine["secret"].startswith("whsec_")
            alice_hook.secret = mine["secret"]
            theirs = _add(bob, bob_hook.url)
            bob_hook.secret = theirs["secret"]
            sid = new_session(alice)["session_id"]
            run = alice.post(f"/v1/sessions/{sid}/messages", json={"text": "hi"}).json()
            assert wait_terminal(alice, run["run_id"])["status"] == "completed"
            [delivery] = _delivered(alice, mine["id"])
            assert delivery["type"] == "run.finished" and delivery["attempts"] == 1
            payload = alice_hook.events[delivery["event_id"]]
            assert payload["data"]["run_id"] == run["run_id"]
            assert payload["data"]["status"] == "completed"
            assert bob_hook.wire == []
            listed = alice.get("/v1/webhooks").json()["webhooks"]
            assert [w["id"] for w in listed] == [mine["id"]]
            assert "secret" not in listed[0]
            error(bob.get(f"/v1/webhooks/{mine['id']}/deliveries"), 404, "not_found")
            error(bob.delete(f"/v1/webhooks/{mine['id']}"), 404, "not_found")
            with live.client("root") as root:
                assert len(root.get("/v1/webhooks").json()["webhooks"]) == 2
            assert alice.delete(f"/v1/webhooks/{mine['id']}").json()["removed"] is True
            assert alice.get("/v1/webhooks").json()["webhooks"] == []
    finally:
        alice_hook.stop()
        bob_hook.stop()


@pytest.mark.slow
def test_bad_webhooks_are_refused(live: Live) -> None:
    """The schema names what is accepted (an http(s) URL pattern, the event names), so a
    bad value is a 422 naming the field; nothing is stored."""
    assert set(get_args(EventName)) == set(EVENT_TYPES)
    with live.client("alice") as alice:
        bad_url = alice.post(
            "/v1/webhooks", json={"url": "file:///etc/passwd", "events": ["run.finished"]}
        )
        assert "body.url" in error(bad_url, 422, "invalid_request")["message"]
        bad_event = alice.post(
            "/v1/webhooks", json={"url": "http://127.0.0.1:9/", "events": ["nope"]}
        )
        message = error(bad_event, 422, "invalid_request")["message"]
        assert "body.events.0" in message and "run.finished" in message
        error(alice.post("/v1/webhooks/wh_nope/resume"), 404, "not_found")
        assert alice.get("/v1/webhooks").json()["webhooks"] == []


@pytest.mark.slow
def test_a_call_waiting_for_approval_is_announced(gated: Live) -> None:
    """Through the real gate: the policy asks a person about ``echo``; the approval
    request and the run's end each reach the endpoint once."""
    receiver = Receiver()
    try:
        with gated.client("alice") as alice:
            hook = alice.post(
                "/v1/webhooks",
                json={"url": receiver.url, "events": ["approval.needed", "run.finished"]},
            ).json()
            receiver.secret = hook["secret"]
            sid = new_session(alice)["session_id"]
            run = alice.post(f"/v1/sessions/{sid}/messages", json={"text": "tool please"}).json()
            assert wait_terminal(alice, run["run_id"])["status"] == "awaiting_approval"
            [needed] = _delivered(alice, hook["id"])
            assert needed["type"] == "approval.needed"
            data = receiver.events[needed["event_id"]]["data"]
            assert data["run_id"] == run["run_id"] and data["tool_name"] == "echo"
            [approval] = alice.get(f"/v1/sessions/{sid}/approvals").json()["approvals"]
            assert data["approval_id"] == approval["approval_id"]
            r = alice.post(f"/v1/approvals/{approval['approval_id']}/approve", json={})
            assert r.status_code == 200, r.text
            assert wait_terminal(alice, run["run_id"])["status"] == "completed"
            found = _delivered(alice, hook["id"])
            assert sorted(d["type"] for d in found) == ["approval.needed", "run.finished"]
            assert len(receiver.wire) == 2 and not receiver.rejected
    finally:
        receiver.stop()
