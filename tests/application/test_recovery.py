"""Recovery in-process: a run stopped at each persistence point is taken over by another
owner once its lease expires. (tests/crash/ does the same with real killed processes.)"""

from __future__ import annotations

import asyncio
import hashlib
from pathlib import Path

import pytest

from plait.adapters.stores.memory.store import MemoryStore
from plait.application.ports import ModelResponse, ToolInvocation
from plait.application.service import RunResult
from plait.domain.errors import LeaseLostError, RunStateError, ValidationError
from plait.domain.messages import ToolStatus
from plait.domain.runs import RunStatus
from plait.domain.session import ExecutionState
from plait.domain.tools import EffectClass
from plait.testing import FixedClock, RecordingTool, SequentialIds
from tests.application.conftest import Rig, call, make_rig, reply, run, shape, spec


def _ids() -> SequentialIds:
    return SequentialIds(start=1000)


class Died(BaseException):
    """Stands for the process dying at a checkpoint."""


def die_at(point: str, nth: int = 1) -> object:
    seen = {"n": 0}

    def hook(name: str) -> None:
        if name == point:
            seen["n"] += 1
            if seen["n"] == nth:
                raise Died(point)

    return hook


def _tools(log: list[str]) -> tuple[RecordingTool, RecordingTool]:
    def append(inv: ToolInvocation) -> str:
        log.append(inv.call.arguments()["text"])
        return "appended"

    reader = RecordingTool(spec("read"), output="content")
    writer = RecordingTool(spec("append", EffectClass.SIDE_EFFECT), fn=append)
    return reader, writer


def _script() -> list[ModelResponse]:
    return [
        reply("", call("read", {"text": "cfg"}, "c1"), call("append", {"text": "line"}, "c2")),
        reply("all done"),
    ]


def _crash_then_recover(point: str) -> tuple[object, object, list[str], RecordingTool]:
    store, clock = MemoryStore(), FixedClock()
    log: list[str] = []
    reader, writer = _tools(log)
    first = make_rig(
        _script(), [reader, writer], store=store, clock=clock, checkpoint=die_at(point)
    )
    s = run(first.service.create_session())
    with pytest.raises(Died):
        run(first.service.send(s.id, "go"))
    clock.advance(61)  # the dead owner's lease expires
    reader2, writer2 = _tools(log)
    # the model answers again from where the history is (the scripts are stateless)
    n_assistant = sum(1 for m in run(store.read_messages(s.id)) if m.message.kind == "assistant")
    second = make_rig(
        _script()[n_assistant:], [reader2, writer2], store=store, clock=clock, ids=_ids()
    )
    second.service.owner = "worker-2"
    reports = run(second.service.recover())
    assert [r.outcome for r in reports] == ["resumed"]
    return second, s, log, reader2


def test_crash_after_user_message_asks_the_model_again() -> None:
    rig, s, log, _ = _crash_then_recover("user_saved")
    history = shape(rig.history(s.id))  # type: ignore[attr-defined]
    assert [h[1] for h in history] == [
        "user",
        "assistant",
        "tool_result",
        "tool_result",
        "assistant",
    ]
    assert log == ["line"]


def test_crash_after_assistant_message_runs_the_calls_once() -> None:
    rig, s, log, reader = _crash_then_recover("assistant_saved")
    history = shape(rig.history(s.id))  # type: ignore[attr-defined]
    assert history[2:] == [
        (3, "tool_result", "c1", "succeeded", "content"),
        (4, "tool_result", "c2", "succeeded", "appended"),
        (5, "assistant", "all done", ()),
    ]
    assert log == ["line"]  # never started, so it ran exactly once
    assert len(reader.invocations) == 1


def test_crash_after_read_only_result_does_not_rerun_it() -> None:
    rig, s, log, reader = _crash_then_recover("result_saved")
    assert len(reader.invocations) == 0
    assert log == ["line"]
    assert shape(rig.history(s.id))[2:] == [  # type: ignore[attr-defined]
        (3, "tool_result", "c1", "succeeded", "content"),
        (4, "tool_result", "c2", "succeeded", "appended"),
        (5, "assistant", "all done", ()),
    ]


def test_crash_during_a_side_effect_is_unknown_and_waits_for_a_person() -> None:
    store, clock = MemoryStore(), FixedClock()
    log: list[str] = []
    reader, writer = _tools(log)
    first = make_rig(
        _script(), [reader, writer], store=store, clock=clock, checkpoint=die_at("tool_returned", 2)
    )
    s = run(first.service.create_session())
    with pytest.raises(Died):
        run(first.service.send(s.id, "go"))
    assert log == ["line"]  # the effect happened, its result was never saved
    clock.advance(61)
    reader2, writer2 = _tools(log)
    second = make_rig(
        [reply("noted, done")], [reader2, writer2], store=store, clock=clock, ids=_ids()
    )
    second.service.owner = "worker-2"
    (report,) = run(second.service.recover())
    assert report.result is not None
    run_ = report.result.run
    assert run_.status is RunStatus.AWAITING_RESOLUTION
    assert log == ["line"]  # not repeated
    records = {r.call_id: r for r in run(store.get_executions(run_.id))}
    assert records["c2"].result_status is ToolStatus.UNKNOWN
    assert records["c2"].state is ExecutionState.STARTED
    assert [h[1] for h in shape(second.history(s.id))] == ["user", "assistant", "tool_result"]

    # resolving needs a real unknown call and a note
    with pytest.raises(RunStateError):
        run(second.service.resolve(run_.id, "c1", "succeeded", "x"))
    with pytest.raises(ValidationError):
        run(second.service.resolve(run_.id, "c2", "succeeded", "  "))
    with pytest.raises(RunStateError):
        run(second.service.resume(run_.id))  # still unresolved

    run(second.service.resolve(run_.id, "c2", "succeeded", "the line is in the file"))
    result = run(second.service.resume(run_.id))
    assert result.run.status is RunStatus.COMPLETED
    assert shape(second.history(s.id))[3:] == [
        (
            4,
            "tool_result",
            "c2",
            "succeeded",
            "the line is in the file (outcome verified by user)",
        ),
        (5, "assistant", "noted, done", ()),
    ]
    assert log == ["line"]
    assert run(store.get_session(s.id)).active_run_id is None


def test_cancelling_a_run_awaiting_resolution_pairs_every_call() -> None:
    store, clock = MemoryStore(), FixedClock()
    log: list[str] = []
    reader, writer = _tools(log)
    script = [
        reply(
            "",
            call("append", {"text": "one"}, "c1"),
            call("read", {"text": "x"}, "c2"),
        )
    ]
    first = make_rig(
        script, [reader, writer], store=store, clock=clock, checkpoint=die_at("tool_returned")
    )
    s = run(first.service.create_session())
    with pytest.raises(Died):
        run(first.service.send(s.id, "go"))
    clock.advance(61)
    second = make_rig([], _tools(log), store=store, clock=clock, ids=_ids())
    (report,) = run(second.service.recover())
    assert report.result is not None
    run_id = report.result.run.id
    cancelled = run(second.service.cancel(run_id))
    assert cancelled.status is RunStatus.CANCELLED
    assert shape(second.history(s.id))[2:] == [
        (
            3,
            "tool_result",
            "c1",
            "unknown",
            "outcome unknown, never resolved: the process stopped while this call was running; "
            "whether its effect happened is unknown",
        ),
        (
            4,
            "tool_result",
            "c2",
            "cancelled",
            "not executed: the run was cancelled while awaiting resolution",
        ),
    ]
    assert run(store.get_session(s.id)).active_run_id is None


def test_a_live_lease_is_not_taken_over() -> None:
    store, clock = MemoryStore(), FixedClock()
    gate = asyncio.Event()

    async def hold(req: object) -> ModelResponse:
        await gate.wait()
        return reply("x")

    first = make_rig([hold], store=store, clock=clock)
    second = make_rig([], store=store, clock=clock)
    second.service.owner = "worker-2"
    s = run(first.service.create_session())

    async def scenario() -> None:
        task = asyncio.create_task(first.service.send(s.id, "go"))
        while not first.turns.requests:  # noqa: ASYNC110 - polling a plain list
            await asyncio.sleep(0)
        assert await second.service.recover() == []  # nothing stale
        (report,) = await second.service.recover(run_id=next(iter(first.service._active)))
        assert report.outcome == "skipped" and "lease" in report.detail
        gate.set()
        await task

    run(scenario())


def test_two_recoverers_exactly_one_wins() -> None:
    store, clock = MemoryStore(), FixedClock()
    first = make_rig([reply("x")], store=store, clock=clock, checkpoint=die_at("user_saved"))
    s = run(first.service.create_session())
    with pytest.raises(Died):
        run(first.service.send(s.id, "go"))
    clock.advance(61)
    (stale,) = run(store.list_stale_runs(now=clock.now()))
    now = clock.now()
    run(store.claim_run(stale.id, owner="a", now=now, expires_at=now + 60))
    with pytest.raises(LeaseLostError):
        run(store.claim_run(stale.id, owner="b", now=now, expires_at=now + 60))


def _write_script(args: dict[str, str]) -> list[ModelResponse]:
    return [reply("", call("write_file", args, "w1")), reply("written")]


def _crash_write(tmp_path: Path, args: dict[str, str]) -> tuple[Rig, str, RunResult]:
    from plait.adapters.tools import workspace_tools

    store, clock = MemoryStore(), FixedClock()
    first = make_rig(
        _write_script(args),
        workspace_tools(),
        store=store,
        clock=clock,
        checkpoint=die_at("tool_returned"),
    )
    s = run(first.service.create_session(workspace=str(tmp_path)))
    with pytest.raises(Died):
        run(first.service.send(s.id, "write it"))
    clock.advance(61)
    second = make_rig(
        _write_script(args)[1:], workspace_tools(), store=store, clock=clock, ids=_ids()
    )
    (report,) = run(second.service.recover())
    assert report.result is not None
    return second, s.id, report.result


def test_compare_and_write_is_idempotent_and_reruns_after_a_crash(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("old\n")
    old = hashlib.sha256(b"old\n").hexdigest()
    rig, session_id, result = _crash_write(
        tmp_path, {"path": "a.txt", "content": "new\n", "expected_sha256": old}
    )
    assert result.run.status is RunStatus.COMPLETED
    rows = shape(rig.history(session_id))
    assert rows[2][:4] == (3, "tool_result", "w1", "succeeded")
    assert "already written" in rows[2][4]
    assert (tmp_path / "a.txt").read_text() == "new\n"
    (record,) = run(rig.store.get_executions(result.run.id))
    assert record.effect is EffectClass.IDEMPOTENT


def test_a_plain_write_is_a_side_effect_and_becomes_unknown(tmp_path: Path) -> None:
    rig, _, result = _crash_write(tmp_path, {"path": "b.txt", "content": "x\n"})
    assert result.run.status is RunStatus.AWAITING_RESOLUTION
    (record,) = run(rig.store.get_executions(result.run.id))
    assert record.effect is EffectClass.SIDE_EFFECT
    assert record.result_status is ToolStatus.UNKNOWN
    assert (tmp_path / "b.txt").read_text() == "x\n"


def test_a_cancel_requested_while_the_process_was_dead_is_honoured_on_recovery() -> None:
    store, clock = MemoryStore(), FixedClock()
    log: list[str] = []
    reader, writer = _tools(log)
    first = make_rig(
        _script(), [reader, writer], store=store, clock=clock, checkpoint=die_at("assistant_saved")
    )
    s = run(first.service.create_session())
    with pytest.raises(Died):
        run(first.service.send(s.id, "go"))
    (stale,) = run(store.list_runs(session_id=s.id))
    run(store.request_cancel(stale.id))  # `plait runs cancel` while nobody drives the run
    clock.advance(61)
    reader2, writer2 = _tools(log)
    second = make_rig([], [reader2, writer2], store=store, clock=clock, ids=_ids())
    (report,) = run(second.service.recover())
    assert report.result is not None
    assert report.result.run.status is RunStatus.CANCELLED
    assert log == [] and reader2.invocations == []  # nothing ran after the cancel
    assert [r[3] for r in shape(second.history(s.id))[2:]] == ["cancelled", "cancelled"]
