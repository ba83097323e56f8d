"""A failure after a run's event stream has started ends the stream cleanly with an
``error`` event in the one error shape (the chunked body is terminated, the client sees
why), instead of a dropped connection; the failure is logged with the run's id, and the
client can resume from the last event it got."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from plait.adapters.stores.memory.store import MemoryStore
from plait.application.ports import Commit
from plait.domain.errors import StoreError
from plait.domain.messages import UserMessage
from plait.domain.runs import Budget, Run, RunStatus
from plait.domain.service import EventType, NewRunEvent, Role
from plait.domain.session import Session
from plait.entrypoints.http.app import create_app
from plait.entrypoints.http.auth import create_key
from plait.entrypoints.http.server import Settings, context_for
from plait.runtime import Runtime
from plait.testing import FixedClock, SequentialIds
from tests.http.conftest import start_server
from tests.http.sse import read_events


class _Failing(MemoryStore):
    """Run events: the first read answers, the following ones fail as set by the test."""

    failure: BaseException | None = None
    reads = 0

    async def read_run_events(
        self, run_id: str, *, after: int = 0, limit: int | None = None
    ) -> Any:
        self.reads += 1
        if self.reads > 1 and self.failure is not None:
            raise self.failure
        return await super().read_run_events(run_id, after=after, limit=limit)


@pytest.fixture
def served() -> Iterator[tuple[str, str, _Failing]]:
    store = _Failing()
    rt = Runtime(
        store=store, artifacts=store, model=None, tools=[], clock=FixedClock(),
        ids=SequentialIds(),
    )  # fmt: skip

    async def setup() -> str:
        _, key = await create_key(
            store, principal="ana", role=Role.USER, clock=FixedClock(), ids=SequentialIds()
        )
        await store.create_session(Session(id="s1", created_at=1.0, owner="ana"))
        run = Run(
            id="r1", session_id="s1", status=RunStatus.QUEUED, budget=Budget(), started_at=1.0
        )
        user = UserMessage(id="m1", text="hi", created_at=1.0, run_id="r1")
        commit = Commit(session_id="s1", expected_version=0, messages=(user,), run=run)
        await store.start_run(commit)
        started = NewRunEvent(type=EventType.RUN_STARTED, at=1.0, data={"run": {"id": "r1"}})
        await store.append_run_events("r1", [started])
        return key

    key = asyncio.run(setup())
    app = create_app(context_for(rt, Settings(db="memory://", serve_workers=0)))
    server, thread, url = start_server(app)
    try:
        yield url, key, store
    finally:
        server.should_exit = True
        thread.join(timeout=20)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("failure", "code"),
    [
        (StoreError("the database went away", store="pg"), "internal"),
        (RuntimeError("disk on fire at /secret/path"), "internal"),
    ],
)
def test_a_failure_mid_stream_ends_it_with_an_error_event(
    served: tuple[str, str, _Failing],
    failure: BaseException,
    code: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    url, key, store = served
    store.failure = failure
    with (
        caplog.at_level(logging.ERROR, logger="plait.http"),
        httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}) as client,
    ):
        frames = read_events(client, "r1")  # a dropped connection raises here
        assert [f.event for f in frames] == ["run_started", "error"]
        assert frames[0].id == "1" and frames[1].id is None  # resume after the last event
        error = frames[1].data["error"]
        assert error["code"] == code and "secret" not in json.dumps(error)
        assert "Last-Event-ID" in error["message"]
        assert client.get("/v1/runs/r1").status_code == 200  # the client goes on
    logged = [r for r in caplog.records if getattr(r, "run_id", None) == "r1"]
    assert logged and logged[0].exc_info is not None


@pytest.mark.slow
def test_a_run_that_vanishes_mid_stream_ends_it_with_not_found(
    served: tuple[str, str, _Failing],
) -> None:
    url, key, store = served
    from plait.domain.errors import RunNotFoundError

    store.failure = RunNotFoundError("run 'r1' not found", run_id="r1")
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}) as client:
        frames = read_events(client, "r1")
    assert [f.event for f in frames] == ["run_started", "error"]
    assert frames[1].data["error"]["code"] == "not_found"
