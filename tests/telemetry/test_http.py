"""Service mode over HTTP: a message posted to the API is a queued run whose trace a
worker continues; a fork made through the API links to the session's trace."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.http.conftest import serve_live
from tests.http.test_api import new_session, wait_terminal
from tests.telemetry.conftest import make_otel, parent_id


@pytest.mark.slow
def test_a_posted_message_and_a_fork_through_the_api_are_traced(tmp_path: Path) -> None:
    otel = make_otel()
    lives = serve_live(tmp_path, telemetry=otel.telemetry)
    live = next(lives)
    try:
        with live.client() as c:
            sid = new_session(c)["session_id"]
            run = c.post(f"/v1/sessions/{sid}/messages", json={"text": "hi"}).json()
            assert wait_terminal(c, run["run_id"])["status"] == "completed"
            messages = c.get(f"/v1/sessions/{sid}/messages").json()["messages"]
            body = {"through_message_id": messages[-1]["message_id"], "request_id": "f1"}
            branch = c.post(f"/v1/sessions/{sid}/fork", json=body)
            assert branch.status_code == 201, branch.text
    finally:
        next(lives, None)
    spans = otel.finished()
    segments = [s for s in spans if s.name == "invoke_agent plait"]
    by_segment = {str(dict(s.attributes or {})["plait.run.segment"]): s for s in segments}
    assert sorted(by_segment) == ["claimed", "queued"]
    queued, claimed = by_segment["queued"], by_segment["claimed"]
    assert dict(claimed.attributes or {})["plait.run.id"] == run["run_id"]
    (root,) = [s for s in spans if s.name == "plait.run"]
    assert root.parent is None
    assert {parent_id(queued), parent_id(claimed)} == {root.context.span_id}
    assert [link.context.span_id for link in claimed.links] == [root.context.span_id]
    (fork,) = [s for s in spans if s.name == "fork_session"]
    assert [link.context.span_id for link in fork.links] == [root.context.span_id]
    assert dict(fork.attributes or {})["gen_ai.conversation.id"] == branch.json()["session_id"]
