"""Fencing between workers (issue 20 item 1): worker A stalls inside a side effect past
its lease without noticing (its clock runs behind, as a process stopped with SIGSTOP
never renews), worker B's stale sweep takes the run over and makes the call ``unknown``.
When A goes on, its result is refused: A stops that run with one warning, no traceback,
and keeps serving other runs; the person's resolution queues the run and it completes,
the effect having run once."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from plait.adapters.stores.postgres.store import PostgresStore
from plait.adapters.stores.sqlite.store import SqliteStore
from plait.adapters.system import RandomIds, SystemClock
from plait.application.ports import ModelRequest, ModelResponse, RawToolCall, ToolInvocation
from plait.application.service import AgentService
from plait.application.worker import Worker
from plait.domain.messages import ToolResultMessage, ToolStatus
from plait.domain.runs import RunStatus
from plait.domain.tools import EffectClass
from plait.entrypoints.http.events import encode_event
from plait.testing import FunctionModel, RecordingTool
from tests.application.conftest import spec
from tests.pg import empty_database


class LateClock(SystemClock):
    """The system clock, ``behind`` seconds late: a lease this process takes has expired
    for everyone else at once, while it believes it holds it for a whole lease."""

    def __init__(self, behind: float) -> None:
        self.behind = behind

    def now(self) -> float:
        return super().now() - self.behind


async def _deploys(request: ModelRequest) -> ModelResponse:
    if isinstance(request.context.items[-1], ToolResultMessage):
        return ModelResponse(text="done")
    return ModelResponse(tool_calls=(RawToolCall(id="c1", name="deploy", arguments={"text": "x"}),))


@pytest.fixture(params=["sqlite", "postgres"])
def opener(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[], Any]:
    if request.param == "sqlite":
        return lambda: SqliteStore(tmp_path / "plait.db")
    url = request.getfixturevalue("pg_url")
    empty_database(url)
    return lambda: PostgresStore(url)


async def _until(check: Callable[[], Any]) -> None:
    async with asyncio.timeout(20.0):
        while not await check():  # noqa: ASYNC110
            await asyncio.sleep(0.02)


@pytest.mark.slow
def test_a_stalled_worker_is_fenced_off_logs_once_and_keeps_serving(
    opener: Callable[[], Any], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)

    async def go() -> None:
        store_a, store_b = opener(), opener()
        effects: list[str] = []
        stalled, resume = asyncio.Event(), asyncio.Event()

        async def deploy(inv: ToolInvocation) -> str:
            effects.append(inv.run_id)
            if len(effects) == 1:
                stalled.set()
                await resume.wait()
            return "deployed"

        tool = RecordingTool(spec("deploy", EffectClass.SIDE_EFFECT), fn=deploy)

        def service(store: Any, owner: str, clock: SystemClock) -> AgentService:
            return AgentService.build(
                store=store, artifacts=store, model=FunctionModel(_deploys, name="m"),
                tools=[tool.tool], clock=clock, ids=RandomIds(), owner=owner,
                lease_seconds=60.0,
            )  # fmt: skip

        a = service(store_a, "worker-a", LateClock(behind=600.0))
        b = service(store_b, "worker-b", SystemClock())
        first = await a.submit((await a.create_session(owner="ana")).id, "deploy")
        worker_a = Worker(service=a, queue=store_a, encode=encode_event, poll_seconds=0.01)
        stop_a = asyncio.Event()
        running_a = asyncio.create_task(worker_a.run(stop_a))
        await stalled.wait()

        worker_b = Worker(service=b, queue=store_b, encode=encode_event, poll_seconds=0.01)
        stop_b = asyncio.Event()
        running_b = asyncio.create_task(worker_b.run(stop_b))  # sweeps at once

        async def waiting() -> bool:
            run = await store_b.get_run(first.id)
            return run.status is RunStatus.AWAITING_RESOLUTION

        await _until(waiting)
        stop_b.set()
        await running_b

        resume.set()  # A goes on, believing it still holds the run

        async def fenced() -> bool:
            return any("lease was taken over" in r.getMessage() for r in caplog.records)

        await _until(fenced)
        assert (await store_b.get_run(first.id)).status is RunStatus.AWAITING_RESOLUTION
        (record,) = await store_b.get_executions(first.id)
        assert record.result_status is ToolStatus.UNKNOWN

        # A keeps serving: another run is claimed and completed by it.
        second = await b.submit((await b.create_session(owner="ana")).id, "deploy again")

        async def finished(run_id: str) -> bool:
            return (await store_b.get_run(run_id)).status is RunStatus.COMPLETED

        await _until(lambda: finished(second.id))
        # The person's resolution queues the stuck run; A finishes it.
        queued = await b.resolve(first.id, "c1", "succeeded", "it is deployed", queue=True)
        assert queued.status is RunStatus.QUEUED
        await _until(lambda: finished(first.id))
        stop_a.set()
        await running_a
        assert effects == [first.id, second.id]  # each effect ran once

        taken = [r for r in caplog.records if "lease was taken over" in r.getMessage()]
        assert len(taken) == 1 and first.id in taken[0].getMessage()
        assert taken[0].levelno == logging.WARNING
        assert not [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]
        await store_a.close()
        await store_b.close()

    asyncio.run(go())
