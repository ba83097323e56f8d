"""Resolving an unknown outcome over HTTP: a run whose process died while its side effect
ran is recovered by the server's worker as ``awaiting_resolution``; its owner records
what they verified, the run goes back to the queue and the worker finishes it. Someone
else's run does not exist for you; bad resolutions are refused and change nothing."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from plait.adapters.stores.postgres.store import PostgresStore
from plait.adapters.stores.sqlite.store import SqliteStore
from plait.adapters.system import RandomIds, SystemClock
from plait.application.ports import ModelRequest, ModelResponse, RawToolCall
from plait.application.service import AgentService
from plait.domain.tools import EffectClass
from plait.testing import FunctionModel, RecordingTool
from tests.application.conftest import spec
from tests.http.conftest import Live
from tests.http.test_api import error, new_session, wait_terminal


class Died(BaseException):
    """Stands for the process dying at a checkpoint."""


def _die_after_the_tool(point: str) -> None:
    if point == "tool_returned":
        raise Died(point)


def _appends(request: ModelRequest) -> ModelResponse:
    call = RawToolCall(id="c_append", name="append", arguments={"text": "deployed"})
    return ModelResponse(text="appending", tool_calls=(call,))


def _stranded(open_store: Callable[[], Any], session_id: str, text: str) -> RecordingTool:
    """Send ``text`` in another "process" (its own store handle, the server's model name:
    a run continues with the model it started with) that dies right after its
    side effect ran, before the result was saved; its lease is short, so the server's
    worker recovers the run soon. The tool, to count its executions."""
    tool = RecordingTool(spec("append", EffectClass.SIDE_EFFECT), output="appended")

    async def go() -> None:
        store = open_store()
        try:
            service = AgentService.build(
                store=store, artifacts=store, model=FunctionModel(_appends, name="behaviour"),
                tools=[tool.tool], clock=SystemClock(), ids=RandomIds(), owner="dead",
                lease_seconds=0.2, checkpoint=_die_after_the_tool,
            )  # fmt: skip
            with pytest.raises(Died):
                await service.send(session_id, text)
        finally:
            await store.close()

    asyncio.run(go())
    assert len(tool.calls) == 1
    return tool


def _awaiting(c: httpx.Client, sid: str) -> dict[str, Any]:
    """The session's run once the server's worker has recovered it (its stale sweep)."""
    (run,) = c.get(f"/v1/sessions/{sid}/runs").json()["runs"]
    deadline = time.monotonic() + 20
    while run["status"] != "awaiting_resolution":
        assert run["status"] == "running" and time.monotonic() < deadline, run
        time.sleep(0.05)
        run = c.get(f"/v1/runs/{run['run_id']}").json()
    return dict(run)


def _kinds(c: httpx.Client, sid: str) -> list[tuple[str, object, object]]:
    page = c.get(f"/v1/sessions/{sid}/messages").json()["messages"]
    return [(m["kind"], m.get("text") or m.get("content"), m.get("status")) for m in page]


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_resolving_the_unknown_call_queues_the_run_and_a_worker_finishes_it(
    kind: str, request: pytest.FixtureRequest
) -> None:
    live: Live = request.getfixturevalue("live" if kind == "sqlite" else "live_pg")
    if kind == "sqlite":
        opener: Callable[[], Any] = lambda: SqliteStore.open(live.store_path)  # noqa: E731
    else:
        url: str = request.getfixturevalue("pg_url")
        opener = lambda: PostgresStore(url)  # noqa: E731
    with live.client("alice") as alice, live.client("bob") as bob:
        sid = new_session(alice)["session_id"]
        tool = _stranded(opener, sid, "tool deploy")
        run = _awaiting(alice, sid)
        run_id = str(run["run_id"])
        assert run["error"]["code"] == "unknown_effect", run
        path = f"/v1/runs/{run_id}/resolve"
        ok = {"call_id": "c_append", "status": "succeeded", "note": "the line is there"}

        # Someone else's run: as if it did not exist, and nothing changes.
        error(bob.post(path, json=ok), 404, "not_found")
        # Bad bodies name the problem; a call that is not unknown is a state error.
        bad = alice.post(path, json={**ok, "status": "maybe"})
        assert "body.status" in error(bad, 422, "invalid_request")["message"]
        error(alice.post(path, json={**ok, "note": "   "}), 422, "invalid_request")
        error(alice.post(path, json={**ok, "extra": 1}), 422, "invalid_request")
        error(alice.post(path, json={**ok, "call_id": "c_other"}), 409, "run_state")
        error(alice.post("/v1/runs/run_nope/resolve", json=ok), 404, "not_found")
        assert alice.get(f"/v1/runs/{run_id}").json()["status"] == "awaiting_resolution"
        assert [k[0] for k in _kinds(alice, sid)] == ["user", "assistant"]

        resolved = alice.post(path, json=ok)
        assert resolved.status_code == 200, resolved.text
        assert resolved.json()["status"] == "queued"
        done = wait_terminal(alice, run_id, timeout=20.0)
        assert done["status"] == "completed", done
        assert _kinds(alice, sid) == [
            ("user", "tool deploy", None),
            ("assistant", "appending", None),
            ("tool_result", "the line is there (outcome verified by alice)", "succeeded"),
            ("assistant", "answer to tool deploy", None),
        ]
        assert len(tool.calls) == 1  # never run again
        assert alice.get(f"/v1/sessions/{sid}").json()["active_run_id"] is None
        # Resolving again: nothing left to resolve.
        error(alice.post(path, json=ok), 409, "run_state")
