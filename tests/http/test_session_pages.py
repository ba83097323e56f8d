"""Listing sessions over HTTP with many sessions of two principals: each sees exactly its
own, newest first, page by page (``next_before``); an admin pages through everyone's; a
cursor that is unknown or someone else's is a clear 400."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.http.conftest import Live
from tests.http.test_api import error, new_session


def _all_pages(c: httpx.Client, limit: int) -> list[str]:
    ids: list[str] = []
    params: dict[str, Any] = {"limit": limit}
    while True:
        r = c.get("/v1/sessions", params=params)
        assert r.status_code == 200, r.text
        body = r.json()
        assert len(body["sessions"]) <= limit
        ids += [s["session_id"] for s in body["sessions"]]
        if body["next_before"] is None:
            return ids
        assert body["next_before"] == ids[-1]
        params = {"limit": limit, "before": body["next_before"]}


@pytest.mark.slow
def test_each_principal_pages_through_exactly_its_own_sessions(live: Live) -> None:
    with live.client("alice") as alice, live.client("bob") as bob, live.client("root") as root:
        made: dict[str, list[str]] = {"alice": [], "bob": []}
        for i in range(45):
            who, c = ("alice", alice) if i % 3 else ("bob", bob)
            made[who].append(new_session(c, title=f"n{i}")["session_id"])
        for who, c in (("alice", alice), ("bob", bob)):
            assert _all_pages(c, limit=7) == made[who][::-1]
            assert _all_pages(c, limit=500) == made[who][::-1]
            assert all(s["owner"] == who for s in c.get("/v1/sessions").json()["sessions"])
        everyone = _all_pages(root, limit=8)
        assert sorted(everyone) == sorted(made["alice"] + made["bob"])
        assert len(everyone) == len(set(everyone)) == 45
        # A cursor must be one of yours (else it would tell you bob's session exists).
        bobs = made["bob"][3]
        err = error(alice.get("/v1/sessions", params={"before": bobs}), 404, "not_found")
        assert "next_before" in err["message"]
        nope = error(alice.get("/v1/sessions", params={"before": "ses_nope"}), 404, "not_found")
        assert err["message"].replace(bobs, "ses_nope") == nope["message"]
        error(alice.get("/v1/sessions", params={"before": ""}), 422, "invalid_request")
        assert root.get("/v1/sessions", params={"before": bobs}).status_code == 200
        # An admin may narrow the listing to one principal; nobody else may name another.
        only_bob = root.get("/v1/sessions", params={"owner": "bob", "limit": 500}).json()
        assert [s["session_id"] for s in only_bob["sessions"]] == made["bob"][::-1]
        denied = alice.get("/v1/sessions", params={"owner": "bob"})
        assert "admin" in error(denied, 403, "forbidden")["message"]
        own = alice.get("/v1/sessions", params={"owner": "alice", "limit": 500}).json()
        assert [s["session_id"] for s in own["sessions"]] == made["alice"][::-1]


@pytest.mark.slow
def test_paging_by_owner_on_postgresql(live_pg: Live) -> None:
    with live_pg.client("alice") as alice, live_pg.client("bob") as bob:
        made: dict[str, list[str]] = {"alice": [], "bob": []}
        for i in range(20):
            who, c = ("alice", alice) if i % 2 else ("bob", bob)
            made[who].append(new_session(c)["session_id"])
        assert _all_pages(alice, limit=3) == made["alice"][::-1]
        assert _all_pages(bob, limit=4) == made["bob"][::-1]
        error(alice.get("/v1/sessions", params={"before": made["bob"][0]}), 404, "not_found")
