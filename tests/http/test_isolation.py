"""Principal A can neither see nor touch anything of principal B's: every endpoint that
names a session or run answers ``not_found``, exactly as for an id that does not exist.
An admin sees and acts on all."""

from __future__ import annotations

import time

import httpx
import pytest

from tests.http.conftest import Live
from tests.http.test_api import error, new_session, wait_terminal


def _bobs_world(c: httpx.Client) -> tuple[str, str, str]:
    sid = new_session(c, title="bob's")["session_id"]
    run = c.post(f"/v1/sessions/{sid}/messages", json={"text": "tool secret"}).json()
    wait_terminal(c, run["run_id"])
    first = c.get(f"/v1/sessions/{sid}/messages").json()["messages"][0]["message_id"]
    return sid, run["run_id"], first


@pytest.mark.slow
def test_another_principals_session_does_not_exist_for_you(live: Live) -> None:
    with live.client("bob") as bob, live.client("alice") as alice:
        sid, rid, first = _bobs_world(bob)
        mine = new_session(alice)["session_id"]
        attempts = [
            alice.get(f"/v1/sessions/{sid}"),
            alice.get(f"/v1/sessions/{sid}/messages"),
            alice.get(f"/v1/sessions/{sid}/runs"),
            alice.post(f"/v1/sessions/{sid}/messages", json={"text": "hijack"}),
            alice.post(
                f"/v1/sessions/{sid}/fork", json={"through_message_id": first, "request_id": "x"}
            ),
            alice.get(f"/v1/runs/{rid}"),
            alice.post(f"/v1/runs/{rid}/cancel"),
            alice.post(
                f"/v1/runs/{rid}/resolve",
                json={"call_id": "call_1", "status": "failed", "note": "hijack"},
            ),
            alice.get(f"/v1/runs/{rid}/events"),
        ]
        missing = [
            alice.get("/v1/sessions/ses_nope"),
            alice.get("/v1/runs/run_nope"),
        ]
        for r in attempts:
            err = error(r, 404, "not_found")
            assert "bob" not in err["message"]
        # Indistinguishable from ids that do not exist (same status, code, shape).
        assert {r.json()["error"]["code"] for r in missing} == {"not_found"}
        listed = [s["session_id"] for s in alice.get("/v1/sessions").json()["sessions"]]
        assert listed == [mine]
        # Nothing of bob's changed: no new message, no new run, no fork.
        assert len(bob.get(f"/v1/sessions/{sid}/messages").json()["messages"]) == 4
        assert len(bob.get(f"/v1/sessions/{sid}/runs").json()["runs"]) == 1
        assert len(bob.get("/v1/sessions").json()["sessions"]) == 1


@pytest.mark.slow
def test_admin_sees_and_acts_on_everything(live: Live) -> None:
    with live.client("bob") as bob, live.client("root") as root:
        sid, rid, _ = _bobs_world(bob)
        assert root.get(f"/v1/sessions/{sid}").json()["owner"] == "bob"
        assert root.get(f"/v1/runs/{rid}").json()["status"] == "completed"
        assert sid in [s["session_id"] for s in root.get("/v1/sessions").json()["sessions"]]
        run = root.post(f"/v1/sessions/{sid}/messages", json={"text": "from admin"})
        assert run.status_code == 202
        assert wait_terminal(root, run.json()["run_id"])["status"] == "completed"


def _wait_running(c: httpx.Client, run_id: str) -> None:
    deadline = time.monotonic() + 10
    while c.get(f"/v1/runs/{run_id}").json()["status"] != "running":
        assert time.monotonic() < deadline
        time.sleep(0.02)


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_posting_to_anothers_busy_session_is_not_found(
    backend: str, request: pytest.FixtureRequest
) -> None:
    """The submission's one store statement checks the owner before the busy check: the
    answer to alice tells her nothing about bob's session (not even that it is busy)."""
    live: Live = request.getfixturevalue("live" if backend == "sqlite" else "live_pg")
    with live.client("bob") as bob, live.client("alice") as alice, live.client("root") as root:
        sid = new_session(bob)["session_id"]
        run = bob.post(f"/v1/sessions/{sid}/messages", json={"text": "slow one"}).json()
        _wait_running(bob, run["run_id"])
        say = {"text": "x"}
        theirs = error(alice.post(f"/v1/sessions/{sid}/messages", json=say), 404, "not_found")
        nope = error(alice.post("/v1/sessions/ses_nope/messages", json=say), 404, "not_found")
        assert theirs == {
            **nope,
            "message": nope["message"].replace("ses_nope", sid),
            "details": {"session_id": sid},
        }
        # The owner and an admin are told it is busy.
        error(bob.post(f"/v1/sessions/{sid}/messages", json=say), 409, "session_busy")
        error(root.post(f"/v1/sessions/{sid}/messages", json=say), 409, "session_busy")
        assert len(bob.get(f"/v1/sessions/{sid}/messages").json()["messages"]) == 1
        assert [r["run_id"] for r in bob.get(f"/v1/sessions/{sid}/runs").json()["runs"]] == [
            run["run_id"]
        ]
        assert bob.post(f"/v1/runs/{run['run_id']}/cancel").status_code == 200
        assert wait_terminal(bob, run["run_id"])["status"] == "cancelled"
