"""Continuing a run stuck after a resolution over HTTP (issue 20 item 1): a run whose
unknown call was resolved without queueing it (``plait runs resolve`` without
``--queue``, in another process) waits with nothing left to resolve, and the HTTP API
had no way to continue it. ``POST /v1/runs/{id}/resume`` puts it back in the queue and
the server's worker finishes it; someone else's run does not exist for you, and a run
that cannot be continued is a 409 ``run_state``."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from plait.adapters.stores.postgres.store import PostgresStore
from plait.adapters.stores.sqlite.store import SqliteStore
from plait.adapters.system import RandomIds, SystemClock
from plait.application.service import AgentService
from plait.domain.errors import ConfigError
from plait.domain.runs import RunStatus
from plait.testing import FunctionModel
from tests.http.conftest import Live
from tests.http.test_api import error, new_session, wait_terminal
from tests.http.test_resolve import _appends, _awaiting, _kinds, _stranded


def _resolve_without_queue(open_store: Callable[[], Any], run_id: str) -> None:
    """``plait runs resolve RUN ...`` without ``--queue``, in another process."""

    async def go() -> None:
        store = open_store()
        try:
            service = AgentService.build(
                store=store, artifacts=store, model=FunctionModel(_appends, name="behaviour"),
                clock=SystemClock(), ids=RandomIds(), owner="cli",
            )  # fmt: skip
            run = await service.resolve(run_id, "c_append", "succeeded", "the line is there")
            assert run.status is RunStatus.AWAITING_RESOLUTION
        finally:
            await store.close()

    asyncio.run(go())


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_a_run_stuck_after_its_resolution_is_resumed_over_http(
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
        run_id = str(_awaiting(alice, sid)["run_id"])
        path = f"/v1/runs/{run_id}/resume"
        # Still unknown: nothing can continue it yet.
        unknown = error(alice.post(path), 409, "run_state")
        assert "c_append" in unknown["message"] and "resolve" in unknown["message"]
        _resolve_without_queue(opener, run_id)
        assert alice.get(f"/v1/runs/{run_id}").json()["status"] == "awaiting_resolution"
        # Resolving again is refused: nothing is unknown any more (the stuck state).
        ok = {"call_id": "c_append", "status": "succeeded", "note": "again"}
        error(alice.post(f"/v1/runs/{run_id}/resolve", json=ok), 409, "run_state")

        # Someone else's run: as if it did not exist, and nothing changes.
        error(bob.post(path), 404, "not_found")
        error(alice.post("/v1/runs/run_nope/resume"), 404, "not_found")
        assert alice.get(f"/v1/runs/{run_id}").json()["status"] == "awaiting_resolution"

        resumed = alice.post(path)
        assert resumed.status_code == 200, resumed.text
        assert resumed.json()["status"] in ("queued", "running", "completed")
        done = wait_terminal(alice, run_id, timeout=20.0)
        assert done["status"] == "completed", done
        assert [k[0] for k in _kinds(alice, sid)] == [
            "user", "assistant", "tool_result", "assistant",
        ]  # fmt: skip
        assert len(tool.calls) == 1  # never run again
        # An ended run cannot be resumed.
        assert "completed" in error(alice.post(path), 409, "run_state")["message"]


def test_requeue_is_refused_on_a_store_no_worker_can_serve(tmp_path: Any) -> None:
    from plait.adapters.stores.jsonl.store import JsonlStore

    async def go() -> None:
        store = JsonlStore(tmp_path / "store")
        try:
            service = AgentService.build(
                store=store, artifacts=store, model=FunctionModel(_appends, name="behaviour"),
                clock=SystemClock(), ids=RandomIds(), owner="cli",
            )  # fmt: skip
            with pytest.raises(ConfigError, match="no run queue"):
                await service.requeue("run_x")
        finally:
            await store.close()

    asyncio.run(go())
