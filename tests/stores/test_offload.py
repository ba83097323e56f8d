from __future__ import annotations

import asyncio
import functools
import sqlite3
import threading
from pathlib import Path
from typing import Any

import pytest

from plait.adapters.stores.memory.store import MemoryStore
from plait.adapters.stores.shared.offload import (
    InlineIo,
    IoThread,
    Offloaded,
    io_for,
    on_io_thread,
)
from plait.adapters.stores.sqlite.store import SqliteStore
from plait.application.gate import AllowAll
from plait.application.ports import Tool, ToolInvocation, ToolOutput
from plait.application.service import AgentService
from plait.domain.runs import RunStatus
from plait.domain.tools import ToolSpec
from plait.runtime import Runtime
from plait.testing import FixedClock, ScriptedModel, SequentialIds
from tests.contract.builders import new_session


class Blocking:
    def __init__(self) -> None:
        self.threads: list[int] = []
        self.name = "plain attribute"

    async def work(self, x: int) -> int:
        self.threads.append(threading.get_ident())
        return x * 2

    async def suspends(self) -> None:
        await asyncio.sleep(0)


def test_calls_run_on_another_thread_and_return_their_value() -> None:
    inner = Blocking()
    store = Offloaded(inner)

    async def go() -> None:
        assert await store.work(21) == 42
        assert inner.threads and inner.threads[0] != threading.get_ident()
        assert store.name == "plain attribute"
        with pytest.raises(RuntimeError, match="suspended"):
            await store.suspends()

    asyncio.run(go())


def test_a_sqlite_store_works_offloaded(tmp_path: object) -> None:
    async def go() -> None:
        store = Offloaded(SqliteStore.open(f"{tmp_path}/plait.db"))
        await asyncio.gather(*[store.create_session(new_session(f"s{i}")) for i in range(20)])
        assert len(await store.list_sessions()) == 20
        await store.close()

    asyncio.run(go())


# --- the store's blocking I/O never runs on the event loop thread (issue 6 item 7) -----------


class Statements:
    """Installs a trace callback on every connection the SQLite store opens: records the
    thread of each statement and can stall one COMMIT (a slow fsync) until released."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.threads: set[int] = set()
        self.stall = threading.Event()
        self.stalled = threading.Event()
        self.release = threading.Event()
        self.released_in_time: bool | None = None
        connect = sqlite3.connect

        def traced(*args: Any, **kwargs: Any) -> sqlite3.Connection:
            conn: sqlite3.Connection = connect(*args, **kwargs)
            conn.set_trace_callback(self._statement)
            return conn

        monkeypatch.setattr(sqlite3, "connect", traced)

    def _statement(self, sql: str) -> None:
        self.threads.add(threading.get_ident())
        if sql == "COMMIT" and self.stall.is_set():
            self.stall.clear()
            self.stalled.set()
            # On the loop thread this could never be released: the loop is blocked here.
            self.released_in_time = self.release.wait(timeout=5)


def _echo_tool() -> Tool:
    async def echo(invocation: ToolInvocation) -> ToolOutput:
        return ToolOutput(content=str(invocation.call.arguments()["text"]))

    return Tool(spec=ToolSpec(name="echo", description="echo", parameters=SCHEMA), execute=echo)


SCHEMA = {
    "type": "object",
    "properties": {"text": {"type": "string"}},
    "required": ["text"],
    "additionalProperties": False,
}


def _model(steps: int) -> ScriptedModel:
    echo = [{"name": "echo", "arguments": {"text": str(n)}} for n in range(steps)]
    calls = [{"tool_calls": [c]} for c in echo]
    return ScriptedModel({"version": 1, "assistant": [*calls, {"text": "done"}]})


def test_a_serving_runtime_runs_every_sqlite_statement_off_the_loop_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen = Statements(monkeypatch)

    async def go() -> None:
        rt = Runtime.open(
            db=f"sqlite:///{tmp_path}/plait.db",
            model=_model(3),
            tools=[_echo_tool()],
            gate=AllowAll(),
            store_io="thread",
        )
        assert isinstance(rt.store, SqliteStore) and isinstance(rt.store.io, IoThread)
        seen.threads.clear()  # opening the file (schema, pragmas) is synchronous, at start-up
        session = await rt.service.create_session()
        result = await rt.service.send(session.id, "go")
        assert result.run.status is RunStatus.COMPLETED
        assert len(await rt.store.read_messages(session.id)) == 8
        await rt.close()
        assert seen.threads and threading.get_ident() not in seen.threads

    asyncio.run(go())


def test_a_single_run_runtime_makes_no_thread_round_trip_on_a_step(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 27 item 1: the CLI and the Python API drive one run; every statement of the
    run runs on the loop's thread, and no store call goes through an I/O thread."""
    seen = Statements(monkeypatch)
    submitted: list[str] = []
    submit = IoThread.submit

    def spied(self: IoThread, fn: Any, *, hold: bool = False) -> Any:
        submitted.append(repr(self))
        return submit(self, fn, hold=hold)

    monkeypatch.setattr(IoThread, "submit", spied)

    async def go() -> None:
        rt = Runtime.open(
            db=f"sqlite:///{tmp_path}/plait.db",
            model=_model(3),
            tools=[_echo_tool()],
            gate=AllowAll(),
        )
        assert isinstance(rt.store, SqliteStore) and isinstance(rt.store.io, InlineIo)
        seen.threads.clear()
        session = await rt.service.create_session()
        result = await rt.service.send(session.id, "go")
        assert result.run.status is RunStatus.COMPLETED
        assert len(await rt.store.read_messages(session.id)) == 8
        await rt.close()
        assert seen.threads == {threading.get_ident()}
        assert submitted == []

    asyncio.run(go())


def test_in_service_mode_a_blocked_commit_does_not_stall_another_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The runtime of ``plait serve`` and workers (``store_io="thread"``): one run's
    commit blocks (a slow fsync); another run of the process goes on meanwhile."""
    seen = Statements(monkeypatch)

    async def go() -> None:
        rt = Runtime.open(
            db=f"sqlite:///{tmp_path}/plait.db",
            model=_model(2),
            tools=[_echo_tool()],
            gate=AllowAll(),
            store_io="thread",
        )
        session = await rt.service.create_session()
        seen.stall.set()  # the run's first commit (its user message) blocks
        stuck = asyncio.ensure_future(rt.service.send(session.id, "go"))
        assert await asyncio.to_thread(seen.stalled.wait, 5)
        other = AgentService.build(
            store=MemoryStore(),
            artifacts=MemoryStore(),
            model=_model(2),
            tools=[_echo_tool()],
            clock=FixedClock(),
            ids=SequentialIds(),
            gate=AllowAll(),
        )
        elsewhere = await other.create_session()
        assert (await other.send(elsewhere.id, "go")).run.status is RunStatus.COMPLETED
        assert not stuck.done()
        seen.release.set()
        assert (await stuck).run.status is RunStatus.COMPLETED
        assert seen.released_in_time is True
        await rt.close()

    asyncio.run(go())


def test_inline_io_runs_calls_at_once_and_hands_back_errors() -> None:
    io = io_for("inline", "test-inline")
    order: list[int] = []

    def boom() -> None:
        raise ValueError("bad")

    async def go() -> None:
        futures = [io.submit(functools.partial(order.append, n)) for n in range(3)]
        assert order == [0, 1, 2] and all(f.done() for f in futures)
        failed = io.submit(boom)
        assert failed.done()
        with pytest.raises(ValueError, match="bad"):
            await failed
        assert await io.run(lambda: 42) == 42
        assert not on_io_thread()

    asyncio.run(go())
    with pytest.raises(ValueError, match="unknown store I/O mode 'fast'"):
        io_for("fast", "x")  # type: ignore[arg-type]


def test_a_stalled_commit_does_not_stall_the_event_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen = Statements(monkeypatch)

    async def go() -> None:
        store = SqliteStore.open(tmp_path / "plait.db")
        await store.create_session(new_session("slow"))
        seen.stall.set()
        slow = asyncio.ensure_future(store.create_session(new_session("stuck")))
        assert await asyncio.to_thread(seen.stalled.wait, 5)
        # The commit's fsync is stuck: another session's run is served meanwhile.
        other = AgentService.build(
            store=MemoryStore(),
            artifacts=MemoryStore(),
            model=_model(2),
            tools=[_echo_tool()],
            clock=FixedClock(),
            ids=SequentialIds(),
        )
        session = await other.create_session()
        assert (await other.send(session.id, "go")).run.status is RunStatus.COMPLETED
        seen.release.set()
        await slow
        assert seen.released_in_time is True
        assert [s.id for s in await store.list_sessions()] == ["stuck", "slow"]
        await store.close()

    asyncio.run(go())


def test_a_serving_runtime_runs_the_jsonl_store_off_the_loop_thread(tmp_path: Path) -> None:
    threads: list[int] = []

    class Spy:
        async def list_sessions(self, *, limit: int | None = None) -> list[object]:
            threads.append(threading.get_ident())
            return []

    async def go() -> None:
        rt = Runtime.open(
            db=f"jsonl:///{tmp_path}/store", store_only=True, create=True, store_io="thread"
        )
        assert isinstance(rt.store, Offloaded)
        single = Runtime.open(db=f"jsonl:///{tmp_path}/store", store_only=True)
        assert not isinstance(single.store, Offloaded)  # one run: no round trip
        await single.close()
        assert await rt.store.list_sessions() == []
        spied = Offloaded(Spy())
        assert await spied.list_sessions() == []
        assert threads and threads[0] != threading.get_ident()
        await rt.close()

    (tmp_path / "store").mkdir()
    asyncio.run(go())


# --- the I/O thread ----------------------------------------------------------------------


def test_the_io_thread_runs_calls_in_order_and_hands_back_errors() -> None:
    io = IoThread("test-io")
    order: list[int] = []

    def boom() -> None:
        raise ValueError("bad")

    async def go() -> None:
        def step(n: int) -> int:
            order.append(n)
            return n

        futures = [io.submit(functools.partial(step, n)) for n in range(50)]
        assert await asyncio.gather(*futures) == list(range(50))
        assert order == list(range(50))
        with pytest.raises(ValueError, match="bad"):
            await io.run(boom)
        assert await io.run(on_io_thread) is True
        assert not on_io_thread()

    asyncio.run(go())
    io.stop()


def test_a_caller_that_stops_waiting_leaves_the_io_thread_working() -> None:
    io = IoThread("test-io")
    gate = threading.Event()

    async def go() -> None:
        stuck = io.submit(lambda: gate.wait(5))
        stuck.cancel()
        gate.set()
        assert await io.run(lambda: 42) == 42

    asyncio.run(go())
    io.stop()

    async def again() -> None:  # a stopped thread is started again by the next call
        assert await io.run(lambda: "again") == "again"

    asyncio.run(again())
    io.stop()
