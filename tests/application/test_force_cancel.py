"""``cancel(force=True)`` on a running run whose process is gone (issue 24): a call whose
start was recorded and that may have acted is settled ``unknown`` and the run waits for a
person (as recovery does, DESIGN §4), never ``cancelled: not executed``; a read-only call
that started, and calls that never started, are ``cancelled``. On the in-memory store and
on SQLite, with a tool that blocks so the call is running when the cancel comes."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from plait.adapters.stores.memory.store import MemoryStore
from plait.adapters.stores.sqlite.store import SqliteStore
from plait.adapters.system import RandomIds, SystemClock
from plait.application.events import RunEvent, ToolStarted
from plait.application.ports import Tool, ToolInvocation, ToolOutput
from plait.application.service import AgentService
from plait.domain.messages import ToolStatus
from plait.domain.runs import RunStatus
from plait.domain.tools import EffectClass
from plait.testing import FunctionModel
from tests.application.conftest import Turns, call, reply, shape, spec

SAFETY = 60.0  # only a failing test waits this long

Store = MemoryStore | SqliteStore
Opener = Callable[[], Store]


@pytest.fixture(params=["memory", "sqlite"])
def opener(request: pytest.FixtureRequest, tmp_path: Path) -> Opener:
    """Two handles on one store: the process driving the run, and the operator's."""
    if request.param == "memory":
        shared = MemoryStore()
        return lambda: shared
    return lambda: SqliteStore.open(tmp_path / "plait.db")


def _blocking(name: str, effect: EffectClass, release: asyncio.Event) -> Tool:
    async def execute(invocation: ToolInvocation) -> ToolOutput:
        await release.wait()
        return ToolOutput(content="acted")

    return Tool(spec=spec(name, effect), execute=execute, stoppable=False)


def _service(store: Store, owner: str, tools: list[Tool], turns: Turns) -> AgentService:
    return AgentService.build(
        store=store,
        artifacts=store,
        model=FunctionModel(turns, name="fn"),
        tools=tools,
        clock=SystemClock(),
        ids=RandomIds(),
        owner=owner,
        lease_seconds=300.0,
    )


@asynccontextmanager
async def _cut_short(
    opener: Opener, effect: EffectClass, tmp_path: Path, more: list[Any]
) -> AsyncIterator[tuple[AgentService, str, str]]:
    """A run whose call ``c1`` (``effect``) is running in "process A" when "process B"
    force-cancels it; yields B's service, the session id and the cancel's run status."""
    release = asyncio.Event()
    tools = [
        _blocking("act", effect, release),
        _blocking("other", EffectClass.SIDE_EFFECT, release),
    ]
    first = reply("", call("act", {"text": "x"}, "c1"), *more)
    a = _service(opener(), "worker-a", tools, Turns([first, reply("done")]))
    (tmp_path / "ws").mkdir(exist_ok=True)
    session = await a.create_session(workspace=str(tmp_path / "ws"))
    started = asyncio.Event()

    def observe(event: RunEvent) -> None:
        if isinstance(event, ToolStarted):
            started.set()

    send = asyncio.create_task(a.send(session.id, "go", observer=observe))
    await asyncio.wait_for(started.wait(), SAFETY)
    b = _service(opener(), "worker-b", tools, Turns([reply("after")]))
    (run,) = await b.store.list_runs()
    cancelled = await b.cancel(run.id, force=True)
    release.set()  # process A's tool returns: its writes are fenced off
    await asyncio.wait_for(asyncio.gather(send, return_exceptions=True), SAFETY)
    try:
        yield b, session.id, cancelled.status.value
    finally:
        await b.store.close()


async def _side_effect(opener: Opener, tmp_path: Path) -> None:
    async with _cut_short(opener, EffectClass.SIDE_EFFECT, tmp_path, []) as (b, sid, status):
        assert status == "awaiting_resolution"
        (run,) = await b.store.list_runs()
        assert run.status is RunStatus.AWAITING_RESOLUTION and run.error is not None
        assert run.error.code == "unknown_effect"
        (record,) = await b.store.get_executions(run.id)
        assert record.result_status is ToolStatus.UNKNOWN
        assert record.note is not None
        assert "cancelled while this call was running" in record.note
        # no result claims it was not executed: the call waits for a person
        assert [row[1] for row in shape(await b.store.read_messages(sid))] == [
            "user",
            "assistant",
        ]
        # the person says what happened; the cancel asked for still ends the run
        await b.resolve(run.id, "c1", "succeeded", "checked: it acted")
        resumed = await b.resume(run.id)
        assert resumed.run.status is RunStatus.CANCELLED
        rows = shape(await b.store.read_messages(sid))
        assert [row[1:] for row in rows[2:]] == [("tool_result", "c1", "succeeded", rows[2][4])]
        assert "checked: it acted" in rows[2][4]


def test_a_started_side_effect_is_unknown_not_cancelled(opener: Opener, tmp_path: Path) -> None:
    asyncio.run(_side_effect(opener, tmp_path))


async def _one_running_one_not_started(opener: Opener, tmp_path: Path) -> None:
    """Two calls: ``c1`` (a side effect) running, ``c2`` never started: c1 is unknown,
    c2 waits unpaired with it (recovery's rule); cancelling the waiting run pairs both."""
    more = [call("other", {"text": "y"}, "c2")]
    async with _cut_short(opener, EffectClass.SIDE_EFFECT, tmp_path, more) as (b, sid, status):
        assert status == "awaiting_resolution"
        (run,) = await b.store.list_runs()
        ended = await b.cancel(run.id)
        assert ended.status is RunStatus.CANCELLED
        rows = shape(await b.store.read_messages(sid))
        assert [(row[2], row[3]) for row in rows[2:]] == [("c1", "unknown"), ("c2", "cancelled")]


def test_a_call_that_never_started_is_still_cancelled(opener: Opener, tmp_path: Path) -> None:
    asyncio.run(_one_running_one_not_started(opener, tmp_path))


async def _read_only(opener: Opener, tmp_path: Path) -> None:
    async with _cut_short(opener, EffectClass.READ_ONLY, tmp_path, []) as (b, sid, status):
        assert status == "cancelled"
        rows = shape(await b.store.read_messages(sid))
        assert [row[1:4] for row in rows[2:]] == [("tool_result", "c1", "cancelled")]


def test_a_started_read_only_call_is_cancelled(opener: Opener, tmp_path: Path) -> None:
    asyncio.run(_read_only(opener, tmp_path))
