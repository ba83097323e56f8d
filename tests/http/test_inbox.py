"""The cross-session inbox (issue 24): ``GET /v1/approvals?status=pending`` and ``GET
/v1/runs?status=awaiting_resolution`` list what waits for a person in every session the
caller may see, newest first, a page at a time; another principal's items are not
listed and not usable as a cursor; an admin sees everyone's. SQLite and PostgreSQL."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from plait.adapters.stores.postgres.store import PostgresStore
from plait.adapters.stores.sqlite.store import SqliteStore
from tests.http.conftest import Live
from tests.http.test_api import error, new_session
from tests.http.test_resolve import _awaiting, _stranded

KINDS = ["sqlite", "postgres"]


def _waiting_for_approval(c: httpx.Client, text: str) -> tuple[str, str]:
    """A new session whose run waits for approval of its echo call: (session, run)."""
    sid = new_session(c)["session_id"]
    run = c.post(f"/v1/sessions/{sid}/messages", json={"text": text}).json()
    deadline = time.monotonic() + 20
    while run["status"] != "awaiting_approval":
        assert run["status"] in ("queued", "running") and time.monotonic() < deadline, run
        time.sleep(0.05)
        run = c.get(f"/v1/runs/{run['run_id']}").json()
    return sid, str(run["run_id"])


def _pages(c: httpx.Client, path: str, key: str, limit: int) -> list[list[dict[str, Any]]]:
    pages: list[list[dict[str, Any]]] = []
    before: str | None = None
    while True:
        params: dict[str, Any] = {"limit": limit}
        if key == "approvals":
            params["status"] = "pending"
        else:
            params["status"] = "awaiting_resolution"
        if before is not None:
            params["before"] = before
        got = c.get(path, params=params)
        assert got.status_code == 200, got.text
        pages.append(got.json()[key])
        before = got.json()["next_before"]
        if before is None:
            return pages


@pytest.mark.slow
@pytest.mark.parametrize("kind", KINDS)
def test_pending_approvals_paged_and_isolated(kind: str, request: pytest.FixtureRequest) -> None:
    live: Live = request.getfixturevalue("gated" if kind == "sqlite" else "gated_pg")
    with live.client("alice") as alice, live.client("bob") as bob, live.client("root") as root:
        mine = [_waiting_for_approval(alice, f"tool {n}") for n in range(3)]
        theirs = _waiting_for_approval(bob, "tool bob")
        pages = _pages(alice, "/v1/approvals", "approvals", 2)
        assert [len(p) for p in pages] == [2, 1]
        listed = [a for p in pages for a in p]
        # newest first, each with its session and the exact shape of the session listing
        assert [a["session_id"] for a in listed] == [sid for sid, _ in reversed(mine)]
        assert [a["run_id"] for a in listed] == [rid for _, rid in reversed(mine)]
        assert all(a["status"] == "pending" and a["parent"] is None for a in listed)
        per_session = alice.get(f"/v1/sessions/{mine[0][0]}/approvals").json()["approvals"]
        assert listed[-1] == per_session[0] | {"status": listed[-1]["status"]}
        (only,) = bob.get("/v1/approvals", params={"status": "pending"}).json()["approvals"]
        assert only["session_id"] == theirs[0]
        everyone = root.get("/v1/approvals", params={"status": "pending"}).json()["approvals"]
        assert {a["session_id"] for a in everyone} == {theirs[0], *(s for s, _ in mine)}
        # another principal's approval is no cursor for you
        r = bob.get(
            "/v1/approvals", params={"status": "pending", "before": listed[0]["approval_id"]}
        )
        error(r, 404, "not_found")
        error(
            alice.get("/v1/approvals", params={"status": "pending", "before": "apr_x"}),
            404,
            "not_found",
        )
        # a decided request leaves the inbox
        decided = alice.post(
            f"/v1/approvals/{listed[0]['approval_id']}/deny", json={"reason": "no"}
        )
        assert decided.status_code == 200, decided.text
        left = alice.get("/v1/approvals", params={"status": "pending"}).json()["approvals"]
        assert [a["approval_id"] for a in left] == [a["approval_id"] for a in listed[1:]]
        # the status is required and only 'pending'; the limit is bounded
        error(alice.get("/v1/approvals"), 422, "invalid_request")
        error(alice.get("/v1/approvals", params={"status": "approved"}), 422, "invalid_request")
        for bad in (0, 501):
            got = alice.get("/v1/approvals", params={"status": "pending", "limit": bad})
            error(got, 422, "invalid_request")


def _opener(kind: str, live: Live, request: pytest.FixtureRequest) -> Callable[[], Any]:
    if kind == "sqlite":
        return lambda: SqliteStore.open(live.store_path)
    url: str = request.getfixturevalue("pg_url")
    return lambda: PostgresStore(url)


@pytest.mark.slow
@pytest.mark.parametrize("kind", KINDS)
def test_runs_awaiting_resolution_paged_and_isolated(
    kind: str, request: pytest.FixtureRequest
) -> None:
    live: Live = request.getfixturevalue("live" if kind == "sqlite" else "live_pg")
    opener = _opener(kind, live, request)
    with live.client("alice") as alice, live.client("bob") as bob, live.client("root") as root:
        mine = []
        for n in range(2):
            sid = new_session(alice)["session_id"]
            _stranded(opener, sid, f"tool {n}")
            mine.append(_awaiting(alice, sid)["run_id"])
        done = new_session(alice)["session_id"]  # a run that ended is not listed
        alice.post(f"/v1/sessions/{done}/messages", json={"text": "hi"})
        bob_sid = new_session(bob)["session_id"]
        _stranded(opener, bob_sid, "tool b")
        theirs = _awaiting(bob, bob_sid)["run_id"]
        pages = _pages(alice, "/v1/runs", "runs", 1)
        assert [len(p) for p in pages] == [1, 1]
        listed = [x for p in pages for x in p]
        assert [x["run_id"] for x in listed] == list(reversed(mine))
        for x in listed:
            assert x["status"] == "awaiting_resolution"
            (call,) = x["unknown_calls"]
            assert call["call_id"] == "c_append" and call["tool_name"] == "append"
            assert call["result_status"] == "unknown" and call["note"]
        (only,) = bob.get("/v1/runs", params={"status": "awaiting_resolution"}).json()["runs"]
        assert only["run_id"] == theirs
        everyone = root.get("/v1/runs", params={"status": "awaiting_resolution"}).json()["runs"]
        assert {x["run_id"] for x in everyone} == {theirs, *mine}
        r = bob.get("/v1/runs", params={"status": "awaiting_resolution", "before": mine[0]})
        error(r, 404, "not_found")
        error(alice.get("/v1/runs", params={"status": "running"}), 422, "invalid_request")
        error(alice.get("/v1/runs"), 422, "invalid_request")
        # resolved and continued, a run leaves the list
        ok = {"call_id": "c_append", "status": "succeeded", "note": "checked"}
        assert alice.post(f"/v1/runs/{mine[0]}/resolve", json=ok).status_code == 200
        left = alice.get("/v1/runs", params={"status": "awaiting_resolution"}).json()["runs"]
        assert [x["run_id"] for x in left] == [mine[1]]
