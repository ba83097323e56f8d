"""Liveness with a tool that blocks far past its timeout (issue 6 item 3), on a real
SQLite file: the run reports the timeout, its lease keeps being renewed while the tool
blocks, a recovery from a second handle on the same file does not take the run over, and
the blocked work in the worker thread really stops (for the built-in search) or is
abandoned without holding the run up (for a custom tool that cannot be stopped).

Nothing here is timed: the assertions are on states and on the order of events; the
waits are safety nets that only a failing run reaches.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import random
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from plait.adapters.stores.sqlite.store import SqliteStore
from plait.adapters.system import RandomIds, SystemClock
from plait.adapters.tools import workspace_tools
from plait.application.events import RunEvent, ToolStarted
from plait.application.ports import ModelRequest, ModelResponse, Tool, ToolInvocation, ToolOutput
from plait.application.service import AgentService
from plait.domain.runs import Budget, RunStatus
from plait.testing import FunctionModel
from tests.application.conftest import Turns, call, reply, shape, spec

pytestmark = pytest.mark.slow

LEASE = 0.6  # renewed every 0.2 s
TIMEOUT = 5.0  # far longer than the renewals and the recovery attempt below take
SAFETY = 120.0  # only a failing run waits this long

# RE2 matches this in linear time, but slowly: about a second per 64 KiB line of random
# a/b (its RE2 program has 997 instructions). 100 such lines are a minute or more of
# work, so a search that is not stopped is still running long after the run moved on.
_SLOW_PATTERN = r"(?:[ab]*a[ab]{60}){16}c"


class RecordingExecutor(concurrent.futures.ThreadPoolExecutor):
    """The event loop's default executor (``asyncio.to_thread``), keeping every future."""

    def __init__(self) -> None:
        super().__init__(max_workers=4)
        self.futures: list[concurrent.futures.Future[Any]] = []

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        future = super().submit(fn, *args, **kwargs)
        self.futures.append(future)
        return future


def _never(request: ModelRequest) -> ModelResponse:
    raise AssertionError("the second handle must not drive the run")


async def _service(db: Path, owner: str, tool: Tool, model: FunctionModel) -> AgentService:
    store = SqliteStore.open(db)
    return AgentService.build(
        store=store,
        artifacts=store,
        model=model,
        tools=[tool],
        clock=SystemClock(),
        ids=RandomIds(),
        owner=owner,
        lease_seconds=LEASE,
        budget=Budget(tool_timeout_seconds=TIMEOUT),
    )


async def _while_blocked(
    db: Path, tool: Tool, send: asyncio.Task[Any], started: asyncio.Event
) -> list[Any]:
    """Watch the lease from a second handle and try to recover the run; returns what
    recovery reported. Everything here must happen while the tool still blocks."""
    await asyncio.wait_for(started.wait(), SAFETY)
    other = await _service(db, "worker-b", tool, FunctionModel(_never))
    (run,) = await other.store.list_runs()
    expiries: list[float] = []
    while len(expiries) < 4:  # three renewals seen from the other handle
        assert not send.done(), "the run ended before its lease was seen renewed"
        lease = (await other.store.get_run(run.id)).lease
        assert lease is not None and lease.owner == "worker-a"
        if not expiries or lease.expires_at > expiries[-1]:
            expiries.append(lease.expires_at)
        await asyncio.sleep(LEASE / 6)
    reports = [*await other.recover(), *await other.recover(run_id=run.id)]
    assert not send.done(), "the tool stopped blocking before recovery was tried"
    assert expiries == sorted(expiries) and len(set(expiries)) == 4
    await other.store.close()
    return reports


async def _scenario(tmp_path: Path, tool: Tool, args: dict[str, Any]) -> tuple[Any, ...]:
    executor = RecordingExecutor()
    asyncio.get_running_loop().set_default_executor(executor)
    db = tmp_path / "plait.db"
    turns = Turns([reply("", call(tool.spec.name, args, "c1")), reply("done")])
    service = await _service(db, "worker-a", tool, FunctionModel(turns))
    (tmp_path / "ws").mkdir(exist_ok=True)
    session = await service.create_session(workspace=str(tmp_path / "ws"))
    started = asyncio.Event()

    def observe(event: RunEvent) -> None:
        if isinstance(event, ToolStarted):
            started.set()

    send = asyncio.create_task(service.send(session.id, "go", observer=observe))
    reports = await _while_blocked(db, tool, send, started)
    result = await asyncio.wait_for(send, SAFETY)
    history = shape(await service.store.read_messages(session.id))
    (stored,) = await service.store.list_runs()
    await service.store.close()
    return result.run.status, stored, reports, history, executor


def _check(status: Any, stored: Any, reports: list[Any], history: list[Any], name: str) -> None:
    assert status is RunStatus.COMPLETED
    # nothing was stale, and the named run was refused: its lease is held
    assert [(r.outcome, "lease" in r.detail) for r in reports] == [("skipped", True)]
    assert stored.status is RunStatus.COMPLETED and stored.lease is None
    timed_out = f"timed out after {TIMEOUT:g} s"
    assert [row[1:] for row in history] == [
        ("user", "go"),
        ("assistant", "", (("c1", name, history[1][3][0][2]),)),
        ("tool_result", "c1", "failed", timed_out),
        ("assistant", "done", ()),
    ]


def test_a_pathological_search_is_stopped_and_the_run_keeps_its_lease(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    table = bytes((b"a", b"b")[i & 1][0] for i in range(256))
    data = random.Random(6).randbytes(100 * 65536).translate(table)
    (ws / "big.txt").write_bytes(
        b"\n".join(data[i : i + 65535] for i in range(0, len(data), 65535))
    )
    search = next(t for t in workspace_tools() if t.spec.name == "search_text")
    args = {"pattern": _SLOW_PATTERN, "regex": True, "path": "big.txt"}

    status, stored, reports, history, executor = asyncio.run(_scenario(tmp_path, search, args))

    _check(status, stored, reports, history, "search_text")
    # The search thread itself stopped at its deadline: it returned (asyncio.run waited
    # for the executor's threads) with the note only a stopped search writes, not with
    # the "no matches" of a search that read the whole file.
    searched = [f.result() for f in executor.futures if _SLOW_PATTERN in str(f.result())]
    assert len(searched) == 1
    assert searched[0].startswith(f"no matches for {_SLOW_PATTERN!r}\n[search_text ")
    assert "stopped" in searched[0] and searched[0].endswith("; narrow the search]")


def test_a_custom_tool_blocking_in_a_thread_does_not_hold_the_run(tmp_path: Path) -> None:
    (tmp_path / "ws").mkdir()
    release = threading.Event()
    returned: list[str] = []

    def block() -> str:  # what a naive tool author writes: it ignores its time limit
        release.wait(SAFETY)
        returned.append("late")
        return "late"

    async def execute(invocation: ToolInvocation) -> ToolOutput:
        return ToolOutput(content=await asyncio.to_thread(block))

    tool = Tool(spec=spec("block"), execute=execute, stoppable=False)

    async def main() -> tuple[Any, ...]:
        try:
            outcome = await _scenario(tmp_path, tool, {"text": "x"})
            # The run is over while the thread still blocks: nothing waited for it.
            assert not release.is_set() and returned == []
            return outcome
        finally:
            release.set()

    status, stored, reports, history, _ = asyncio.run(main())
    _check(status, stored, reports, history, "block")
    assert returned == ["late"]  # the thread finished only once released; its answer unused
