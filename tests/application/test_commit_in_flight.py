"""A tool result's commit runs while the run goes on to its next model call (issue 6
item 7): the run behaves as if it had been awaited at once — its failure stops the run
before anything later is saved or executed, events keep their order, and the
``result_saved`` checkpoint is hit only once the result is durable."""

from __future__ import annotations

import asyncio
import sqlite3
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from plait.adapters.stores.memory.store import MemoryStore
from plait.adapters.stores.sqlite.store import SqliteStore
from plait.application._journal import _InFlight
from plait.application.events import MessageSaved, ModelCallStarted, RunEvent, ToolStarted
from plait.application.ports import Commit, CommitResult, ModelRequest, ModelResponse
from plait.domain.errors import LeaseLostError, StoreError
from plait.domain.runs import RunStatus
from plait.domain.session import ExecutionRecord, ExecutionState
from plait.domain.tools import EffectClass
from plait.testing import RecordingTool
from tests.application.conftest import call, make_rig, reply, run, shape, spec


class FailsOnResult(MemoryStore):
    """Fails every commit that saves a tool result, from the ``n``-th on (a full disk)."""

    def __init__(self, n: int = 1) -> None:
        super().__init__()
        self.n = n
        self.results = 0

    async def commit(self, commit: Commit) -> CommitResult:
        if any(m.kind == "tool_result" for m in commit.messages):
            self.results += 1
            if self.results >= self.n:
                raise StoreError("disk full", path="test")
        return await super().commit(commit)


def _two_steps() -> list[Any]:
    return [
        reply("", call("t", {"text": "1"}, "c1")),
        reply("", call("t", {"text": "2"}, "c2")),
        reply("done"),
    ]


def test_a_failed_result_commit_stops_the_run_before_the_next_step_is_saved() -> None:
    tool = RecordingTool(spec("t"), fn=lambda inv: "ok")
    store = FailsOnResult()
    rig = make_rig(_two_steps(), [tool], store=store)
    s = run(rig.service.create_session())
    with pytest.raises(StoreError, match="disk full"):
        run(rig.service.send(s.id, "go"))
    # Nothing after the failed commit was saved or executed: the second call never ran.
    assert [r[1] for r in shape(rig.history(s.id))] == ["user", "assistant"]
    assert len(tool.invocations) == 1


def test_a_failed_result_commit_stops_the_run_before_the_next_call_runs() -> None:
    tool = RecordingTool(spec("t"), fn=lambda inv: "ok")
    store = FailsOnResult()
    two_calls = [reply("", call("t", {"text": "1"}, "c1"), call("t", {"text": "2"}, "c2"))]
    rig = make_rig([*two_calls, reply("done")], [tool], store=store)
    s = run(rig.service.create_session())
    with pytest.raises(StoreError, match="disk full"):
        run(rig.service.send(s.id, "go"))
    assert len(tool.invocations) == 1


def test_events_keep_their_order_while_a_result_commit_is_in_flight(tmp_path: Path) -> None:
    tool = RecordingTool(spec("t"), fn=lambda inv: "ok")
    store = SqliteStore.open(tmp_path / "plait.db")
    rig = make_rig(_two_steps(), [tool], store=store)  # type: ignore[arg-type]
    events: list[RunEvent] = []
    s = run(rig.service.create_session())
    result = run(rig.service.send(s.id, "go", observer=events.append))
    assert result.run.status is RunStatus.COMPLETED
    kinds: list[str] = []
    for e in events:
        if isinstance(e, MessageSaved):
            kinds.append(e.stored.message.kind)
        elif isinstance(e, ModelCallStarted):
            kinds.append(f"model#{e.step}")
        elif isinstance(e, ToolStarted):
            kinds.append("tool")
    assert kinds == [
        "user", "model#1", "assistant", "tool", "tool_result",
        "model#2", "assistant", "tool", "tool_result", "model#3", "assistant",
    ]  # fmt: skip
    seqs = [e.stored.seq for e in events if isinstance(e, MessageSaved)]
    assert seqs == sorted(seqs) == list(range(1, 7))
    assert [m.seq for m in result.messages] == list(range(1, 7))
    run(store.close())


def test_result_saved_is_hit_only_once_the_result_is_durable(tmp_path: Path) -> None:
    path = tmp_path / "plait.db"
    seen: list[int] = []

    def checkpoint(point: str) -> None:
        if point == "result_saved":  # read by another connection: committed, not queued
            with sqlite3.connect(path) as other:
                n = other.execute("SELECT count(*) FROM messages WHERE kind = 'tool_result'")
                seen.append(n.fetchone()[0])

    tool = RecordingTool(spec("t"), fn=lambda inv: "ok")
    store = SqliteStore.open(path)
    rig = make_rig(_two_steps(), [tool], store=store, checkpoint=checkpoint)  # type: ignore[arg-type]
    s = run(rig.service.create_session())
    assert run(rig.service.send(s.id, "go")).run.status is RunStatus.COMPLETED
    assert seen == [1, 2]
    run(store.close())


def test_events_held_behind_a_commit_are_told_when_it_lands(tmp_path: Path) -> None:
    """The next model call's start is reported while that call still runs (once the
    result's commit has landed), not only after it returned."""
    tool = RecordingTool(spec("t"), fn=lambda inv: "ok")
    store = SqliteStore.open(tmp_path / "plait.db")
    started_2 = asyncio.Event()
    seen_during_call: list[list[str]] = []
    kinds: list[str] = []

    def observer(e: RunEvent) -> None:
        if isinstance(e, MessageSaved):
            kinds.append(e.stored.message.kind)
        elif isinstance(e, ModelCallStarted):
            kinds.append(f"model#{e.step}")
            if e.step == 2:
                started_2.set()

    async def second(request: ModelRequest) -> ModelResponse:
        await asyncio.wait_for(started_2.wait(), 5)
        seen_during_call.append(list(kinds))
        return reply("done")

    rig = make_rig([reply("", call("t", {"text": "1"}, "c1")), second], [tool], store=store)  # type: ignore[arg-type]
    s = run(rig.service.create_session())
    result = run(rig.service.send(s.id, "go", observer=observer))
    assert result.run.status is RunStatus.COMPLETED
    assert seen_during_call == [["user", "model#1", "assistant", "tool_result", "model#2"]]
    run(store.close())


# --- a result not sent yet rides with the next step's commit ------------------------------


class CountingStore(MemoryStore):
    """Records the message kinds of every commit."""

    def __init__(self) -> None:
        super().__init__()
        self.commits: list[list[str]] = []

    async def commit(self, commit: Commit) -> CommitResult:
        self.commits.append([m.kind for m in commit.messages])
        return await super().commit(commit)


def test_a_result_rides_with_the_next_step_when_the_model_answers_at_once() -> None:
    tool = RecordingTool(spec("t"), fn=lambda inv: "ok")
    store = CountingStore()
    rig = make_rig(_two_steps(), [tool], store=store)
    s = run(rig.service.create_session())
    events: list[RunEvent] = []
    result = run(rig.service.send(s.id, "go", observer=events.append))
    assert result.run.status is RunStatus.COMPLETED
    # One commit per step: each result in one transaction with the model's next turn.
    assert store.commits == [
        ["assistant"], ["tool_result", "assistant"], ["tool_result", "assistant"],
    ]  # fmt: skip
    saved = [e.stored for e in events if isinstance(e, MessageSaved)]
    assert [m.seq for m in saved] == list(range(1, 7))
    assert [m.message.kind for m in saved][2:] == ["tool_result", "assistant"] * 2
    assert [r[1] for r in shape(rig.history(s.id))] == [
        "user", "assistant", "tool_result", "assistant", "tool_result", "assistant",
    ]  # fmt: skip


def test_a_result_is_written_while_a_model_that_suspends_works(tmp_path: Path) -> None:
    """A real model call suspends: the result's commit is sent then, and is durable
    while the model still works (read by another connection from inside the call)."""
    path = tmp_path / "plait.db"
    seen: list[int] = []

    async def second(request: ModelRequest) -> ModelResponse:
        for _ in range(500):
            with sqlite3.connect(path) as other:
                n = other.execute("SELECT count(*) FROM messages WHERE kind = 'tool_result'")
                count = n.fetchone()[0]
            if count:
                break
            await asyncio.sleep(0.01)
        seen.append(count)
        return reply("done")

    tool = RecordingTool(spec("t"), fn=lambda inv: "ok")
    store = SqliteStore.open(path)
    rig = make_rig([reply("", call("t", {"text": "1"}, "c1")), second], [tool], store=store)  # type: ignore[arg-type]
    s = run(rig.service.create_session())
    assert run(rig.service.send(s.id, "go")).run.status is RunStatus.COMPLETED
    assert seen == [1]
    run(store.close())


def test_a_lost_lease_still_writes_the_result_then_stops() -> None:
    """The heartbeat lost the lease while a result waited to be sent: the result is
    written alone (it was fenced when it was made), nothing after it."""
    tool = RecordingTool(spec("t"), fn=lambda inv: "ok")
    store = CountingStore()

    def second(request: ModelRequest) -> ModelResponse:
        for a in rig.service.driver.active.values():
            a.lease_lost = True
        return reply("", call("t", {"text": "2"}, "c2"))

    rig = make_rig([reply("", call("t", {"text": "1"}, "c1")), second], [tool], store=store)
    s = run(rig.service.create_session())
    with pytest.raises(LeaseLostError, match="lost the run's lease"):
        run(rig.service.send(s.id, "go"))
    assert store.commits == [["assistant"], ["tool_result"]]
    assert len(tool.invocations) == 1


def test_records_of_the_same_call_are_not_carried_in_one_commit() -> None:
    record = ExecutionRecord(
        session_id="s", run_id="r", call_id="c1", tool_name="t",
        effect=EffectClass.READ_ONLY, args_digest="d", idempotency_key="k",
        state=ExecutionState.SETTLED, requested_at=0.0,
    )  # fmt: skip
    pending = _InFlight(0, (), (record,), "result_saved")
    assert not pending.takes((replace(record, state=ExecutionState.SETTLED),))
    assert pending.takes((replace(record, call_id="c2"),))


class FailsOnStepAfterResult(MemoryStore):
    """Fails every commit that saves an assistant message together with a tool result."""

    async def commit(self, commit: Commit) -> CommitResult:
        kinds = {m.kind for m in commit.messages}
        if {"tool_result", "assistant"} <= kinds:
            raise StoreError("disk full", path="test")
        return await super().commit(commit)


def test_a_result_is_saved_alone_when_the_step_it_rode_with_fails() -> None:
    tool = RecordingTool(spec("t"), fn=lambda inv: "ok")
    store = FailsOnStepAfterResult()
    rig = make_rig(_two_steps(), [tool], store=store)
    s = run(rig.service.create_session())
    with pytest.raises(StoreError, match="disk full"):
        run(rig.service.send(s.id, "go"))
    # The step that failed is not saved; the tool's result, which rode with it, is.
    assert [r[1] for r in shape(rig.history(s.id))] == ["user", "assistant", "tool_result"]
    assert len(tool.invocations) == 1
