"""A tool result's commit runs while the run goes on to its next model call (issue 6
item 7): the run behaves as if it had been awaited at once — its failure stops the run
before anything later is saved or executed, events keep their order, and the
``result_saved`` checkpoint is hit only once the result is durable."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from plait.adapters.stores.memory import MemoryStore
from plait.adapters.stores.sqlite import SqliteStore
from plait.application.events import MessageSaved, ModelCallStarted, RunEvent, ToolStarted
from plait.application.ports import Commit, CommitResult
from plait.domain.errors import StoreError
from plait.domain.runs import RunStatus
from plait.testing import RecordingTool
from tests.application.conftest import call, make_rig, reply, run, shape, spec


class FailsOnResult(MemoryStore):
    """Fails the commit that saves the ``n``-th tool result."""

    def __init__(self, n: int = 1) -> None:
        super().__init__()
        self.n = n
        self.results = 0

    async def commit(self, commit: Commit) -> CommitResult:
        if any(m.kind == "tool_result" for m in commit.messages):
            self.results += 1
            if self.results == self.n:
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
