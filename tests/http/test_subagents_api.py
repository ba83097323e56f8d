"""GET /v1/sessions/{id}/subagents: the child runs a session's delegate calls started,
read from the session's own execution records (SQLite), and only by their owner."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from plait.application.ports import ModelRequest, ModelResponse, RawToolCall
from plait.domain.messages import ToolResultMessage, UserMessage
from plait.domain.subagents import SubAgent
from plait.testing import FunctionModel
from tests.http.conftest import Live, serve_live
from tests.http.test_api import error, new_session, wait_terminal

HELPER = SubAgent(name="helper", instructions="You are the helper: answer the task.")


async def delegating(request: ModelRequest) -> ModelResponse:
    """Parent: delegates the user's text to the helper (or, for "plain", calls a tool
    that is no sub-agent), then quotes the result. Child: answers at once."""
    last = request.context.items[-1]
    if request.context.instructions.startswith("You are the helper"):
        assert isinstance(last, UserMessage)
        return ModelResponse(text=f"helped with {last.text}")
    if isinstance(last, UserMessage):
        if last.text == "plain":
            call = RawToolCall(id="e1", name="echo", arguments={"text": "hi"})
        else:
            call = RawToolCall(id="d1", name="delegate_helper", arguments={"task": last.text})
        return ModelResponse(text="asking", tool_calls=(call,))
    assert isinstance(last, ToolResultMessage)
    return ModelResponse(text=f"the result: {last.result.content}")


def serve_delegating(tmp_path: Path) -> Iterator[Live]:
    model = FunctionModel(delegating, name="fn")
    return serve_live(tmp_path, model=model, subagents=[HELPER])


@pytest.fixture
def live(tmp_path: Path) -> Iterator[Live]:
    yield from serve_delegating(tmp_path)


@pytest.mark.slow
def test_a_parent_lists_its_sub_agent_child_and_the_child_names_its_parent(live: Live) -> None:
    with live.client("alice") as c:
        parent = new_session(c)["session_id"]
        first = c.post(f"/v1/sessions/{parent}/messages", json={"text": "plain"}).json()
        assert wait_terminal(c, first["run_id"])["status"] == "completed"
        assert c.get(f"/v1/sessions/{parent}/subagents").json() == {"subagents": []}
        run = c.post(f"/v1/sessions/{parent}/messages", json={"text": "sort it"}).json()
        assert wait_terminal(c, run["run_id"])["status"] == "completed"
        r = c.get(f"/v1/sessions/{parent}/subagents")
        assert r.status_code == 200, r.text
        (child,) = r.json()["subagents"]
        assert child["session_id"].startswith("ses_sub_")
        assert child["run_id"].startswith("run_sub_")
        assert (child["parent_run_id"], child["call_id"], child["agent"], child["status"]) == (
            run["run_id"],
            "d1",
            "helper",
            "completed",
        )
        (child_run,) = c.get(f"/v1/sessions/{child['session_id']}/runs").json()["runs"]
        assert child_run["run_id"] == child["run_id"]
        assert child_run["parent"] == {
            "session_id": parent,
            "run_id": run["run_id"],
            "call_id": "d1",
            "agent": "helper",
        }
        # the child has no children of its own
        assert c.get(f"/v1/sessions/{child['session_id']}/subagents").json() == {"subagents": []}
    with live.client("bob") as c:
        error(c.get(f"/v1/sessions/{parent}/subagents"), 404, "not_found")
        error(c.get(f"/v1/sessions/{child['session_id']}/subagents"), 404, "not_found")
    with live.client("alice") as c:
        error(c.get("/v1/sessions/ses_missing/subagents"), 404, "not_found")
