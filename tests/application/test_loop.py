"""The agent loop: persistence order, pairing, corrections, budgets, cancellation, busy."""

from __future__ import annotations

import asyncio
import json

import pytest

from plait.adapters.stores.memory.store import MemoryStore
from plait.application.events import MessageSaved, RunEvent
from plait.application.ports import (
    Commit,
    CommitResult,
    ModelRequest,
    ModelResponse,
    ToolInvocation,
)
from plait.domain.errors import (
    ConfigError,
    ConflictError,
    ModelError,
    SessionBusyError,
    SessionNotFoundError,
    ToolError,
    ValidationError,
)
from plait.domain.messages import ToolStatus, UserMessage
from plait.domain.runs import Budget, RunStatus
from plait.domain.session import ExecutionState, StoredMessage
from plait.domain.tools import EffectClass
from plait.testing import RecordingTool, echo_tool
from tests.application.conftest import call, make_rig, reply, run, shape, spec


def test_plain_answer_completes_and_is_stored() -> None:
    rig = make_rig([reply("hello there")])
    s = run(rig.service.create_session())
    result = run(rig.service.send(s.id, "hi"))
    assert result.run.status is RunStatus.COMPLETED
    assert shape(rig.history(s.id)) == [(1, "user", "hi"), (2, "assistant", "hello there", ())]
    assert [m.seq for m in result.messages] == [1, 2]
    stored_run = run(rig.store.get_run(result.run.id))
    assert stored_run == result.run
    assert stored_run.usage.steps == 1 and stored_run.usage.model_calls == 1
    assert stored_run.usage.input_tokens == 10 and stored_run.usage.output_tokens == 5
    assert run(rig.store.get_session(s.id)).active_run_id is None


def test_two_calls_in_one_message_are_paired_by_call_id_in_order() -> None:
    echo = echo_tool()
    rig = make_rig(
        [
            reply("two", call("echo", {"text": "a"}, "c1"), call("echo", '{"text": "b"}', "c2")),
            reply("done"),
        ],
        [echo],
    )
    s = run(rig.service.create_session())
    result = run(rig.service.send(s.id, "go"))
    assert result.run.status is RunStatus.COMPLETED
    assert shape(rig.history(s.id)) == [
        (1, "user", "go"),
        (2, "assistant", "two", (("c1", "echo", '{"text":"a"}'), ("c2", "echo", '{"text": "b"}'))),
        (3, "tool_result", "c1", "succeeded", "a"),
        (4, "tool_result", "c2", "succeeded", "b"),
        (5, "assistant", "done", ()),
    ]
    # the second model call saw both results
    seen = rig.turns.requests[1].context.items
    assert [m.kind for m in seen] == ["user", "assistant", "tool_result", "tool_result"]
    records = run(rig.store.get_executions(result.run.id))
    assert {(r.call_id, r.state, r.result_status) for r in records} == {
        ("c1", ExecutionState.SETTLED, ToolStatus.SUCCEEDED),
        ("c2", ExecutionState.SETTLED, ToolStatus.SUCCEEDED),
    }
    assert echo.calls[0].id == "c1" and echo.calls[1].id == "c2"
    assert echo.invocations[0].idempotency_key != echo.invocations[1].idempotency_key


def test_assistant_message_is_saved_before_the_tool_runs() -> None:
    seen: list[list[str]] = []
    rig_holder: list[object] = []

    async def inspect(inv: ToolInvocation) -> str:
        history = await rig.store.read_messages(inv.session_id)
        seen.append([m.message.kind for m in history])
        return "ok"

    tool = RecordingTool(spec("probe"), fn=inspect)
    rig = make_rig([reply("", call("probe", {"text": "x"}, "c1")), reply("done")], [tool])
    rig_holder.append(rig)
    s = run(rig.service.create_session())
    run(rig.service.send(s.id, "go"))
    assert seen == [["user", "assistant"]]


@pytest.mark.parametrize(
    ("bad", "problem"),
    [
        (call("nope", {"text": "x"}, "c1"), "unknown tool 'nope'"),
        (call("echo", "{not json", "c1"), "arguments are not valid JSON"),
        (call("echo", {"txt": "x"}, "c1"), "do not match its schema"),
        (call("echo", {"text": "x"}, None), "missing call id"),
        (call("echo", "[1, 2]", "c1"), "must be a JSON object"),
    ],
)
def test_invalid_output_is_corrected_and_never_stored(bad: object, problem: str) -> None:
    echo = echo_tool()
    rig = make_rig(
        [reply("bad", bad), reply("", call("echo", {"text": "fixed"}, "c9")), reply("ok")],  # type: ignore[arg-type]
        [echo],
    )
    s = run(rig.service.create_session())
    result = run(rig.service.send(s.id, "go"))
    assert result.run.status is RunStatus.COMPLETED
    assert result.run.usage.corrections == 1
    assert result.run.usage.model_calls == 3
    correction = rig.turns.requests[1].context.corrections
    assert len(correction) == 1 and problem in correction[0].problems[0]
    assert shape(rig.history(s.id)) == [
        (1, "user", "go"),
        (2, "assistant", "", (("c9", "echo", '{"text":"fixed"}'),)),
        (3, "tool_result", "c9", "succeeded", "fixed"),
        (4, "assistant", "ok", ()),
    ]
    assert len(echo.invocations) == 1


def test_duplicate_and_reused_call_ids_are_rejected() -> None:
    rig = make_rig(
        [
            reply("", call("echo", {"text": "a"}, "c1"), call("echo", {"text": "b"}, "c1")),
            reply("", call("echo", {"text": "a"}, "c1")),
            reply("", call("echo", {"text": "again"}, "c1")),
            reply("", call("echo", {"text": "new"}, "c2")),
            reply("end"),
        ],
        [echo_tool()],
        budget=Budget(max_corrections=3),
    )
    s = run(rig.service.create_session())
    result = run(rig.service.send(s.id, "go"))
    assert result.run.status is RunStatus.COMPLETED
    requests = rig.turns.requests
    assert "repeated in this message" in requests[1].context.corrections[-1].problems[0]
    assert requests[2].context.corrections == ()
    # after c1 ran, re-using it is rejected
    assert "already used in this session" in requests[3].context.corrections[-1].problems[0]
    assert [m[2] for m in shape(rig.history(s.id)) if m[1] == "tool_result"] == ["c1", "c2"]


def test_a_later_run_may_not_reuse_a_call_id_of_an_earlier_one() -> None:
    rig = make_rig(
        [
            reply("", call("echo", {"text": "a"}, "c1")),
            reply("done"),
            reply("", call("echo", {"text": "again"}, "c1")),
            reply("", call("echo", {"text": "new"}, "c2")),
            reply("end"),
        ],
        [echo_tool()],
        budget=Budget(max_corrections=3),
    )
    s = run(rig.service.create_session())
    assert run(rig.service.send(s.id, "first")).run.status is RunStatus.COMPLETED
    result = run(rig.service.send(s.id, "second"))
    assert result.run.status is RunStatus.COMPLETED
    problems = rig.turns.requests[3].context.corrections[-1].problems
    assert "already used in this session" in problems[0]
    assert [m[2] for m in shape(rig.history(s.id)) if m[1] == "tool_result"] == ["c1", "c2"]


def test_invalid_output_fails_the_run_after_the_bound() -> None:
    rig = make_rig(
        [reply("", call("nope", {}, "c1"))] * 3, [echo_tool()], budget=Budget(max_corrections=2)
    )
    s = run(rig.service.create_session())
    result = run(rig.service.send(s.id, "go"))
    assert result.run.status is RunStatus.FAILED
    assert result.run.error is not None
    assert result.run.error.code == "invalid_model_output"
    assert "unknown tool 'nope'" in result.run.error.message
    assert result.run.usage.model_calls == 3 and result.run.usage.corrections == 2
    assert shape(rig.history(s.id)) == [(1, "user", "go")]
    assert run(rig.store.get_executions(result.run.id)) == []
    assert run(rig.store.get_session(s.id)).active_run_id is None


def _looping(n: int) -> list[ModelResponse]:
    return [reply("", call("echo", {"text": str(i)}, f"c{i}")) for i in range(n)]


def test_max_steps_ends_the_run_budget_exhausted() -> None:
    rig = make_rig(_looping(10), [echo_tool()], budget=Budget(max_steps=3))
    s = run(rig.service.create_session())
    result = run(rig.service.send(s.id, "go"))
    assert result.run.status is RunStatus.BUDGET_EXHAUSTED
    assert result.run.error is not None and result.run.error.code == "max_steps"
    assert result.run.usage.steps == 3
    kinds = [m[1] for m in shape(rig.history(s.id))]
    assert kinds == ["user"] + ["assistant", "tool_result"] * 3
    # the session stays usable
    assert run(rig.store.get_session(s.id)).active_run_id is None


def test_max_model_calls_counts_corrections() -> None:
    rig = make_rig(
        [reply("", call("nope", {}, "c1")), *_looping(5)],
        [echo_tool()],
        budget=Budget(max_model_calls=3),
    )
    s = run(rig.service.create_session())
    result = run(rig.service.send(s.id, "go"))
    assert result.run.status is RunStatus.BUDGET_EXHAUSTED
    assert result.run.error is not None and result.run.error.code == "max_model_calls"
    assert result.run.usage.model_calls == 3
    assert result.run.usage.steps == 2


def test_token_ceiling_ends_the_run() -> None:
    rig = make_rig(
        [reply("", call("echo", {"text": str(i)}, f"c{i}"), tokens=(400, 100)) for i in range(5)],
        [echo_tool()],
        budget=Budget(max_total_tokens=1000),
    )
    s = run(rig.service.create_session())
    result = run(rig.service.send(s.id, "go"))
    assert result.run.status is RunStatus.BUDGET_EXHAUSTED
    assert result.run.error is not None and result.run.error.code == "max_total_tokens"
    assert result.run.usage.total_tokens == 1000


def test_deadline_ends_the_run_and_cancels_unstarted_calls() -> None:
    def slow_tool_first(req: ModelRequest) -> ModelResponse:
        return reply("", call("tick", {"text": "1"}, "c1"), call("tick", {"text": "2"}, "c2"))

    tick_holder: list[object] = []

    def tick(inv: ToolInvocation) -> str:
        rig.clock.advance(61)  # the first call uses up the deadline
        return "tick"

    tick_tool = RecordingTool(spec("tick"), fn=tick)
    tick_holder.append(tick_tool)
    rig = make_rig([slow_tool_first], [tick_tool], budget=Budget(deadline_seconds=60))
    s = run(rig.service.create_session())
    result = run(rig.service.send(s.id, "go"))
    assert result.run.status is RunStatus.BUDGET_EXHAUSTED
    assert result.run.error is not None and result.run.error.code == "deadline"
    assert shape(rig.history(s.id))[2:] == [
        (3, "tool_result", "c1", "succeeded", "tick"),
        (4, "tool_result", "c2", "cancelled", "not executed: the run reached its deadline of 60 s"),
    ]
    assert len(tick_tool.invocations) == 1


def test_deadline_interrupts_a_slow_model() -> None:
    async def slow(req: ModelRequest) -> ModelResponse:
        await asyncio.sleep(5)
        return reply("late")

    from plait.testing import FixedClock

    class RealMonotonic(FixedClock):
        def monotonic(self) -> float:
            import time

            return time.monotonic()

    rig = make_rig([slow], budget=Budget(deadline_seconds=0.05), clock=RealMonotonic())
    s = run(rig.service.create_session())
    result = run(rig.service.send(s.id, "go"))
    assert result.run.status is RunStatus.BUDGET_EXHAUSTED
    assert result.run.error is not None and result.run.error.code == "deadline"
    assert shape(rig.history(s.id)) == [(1, "user", "go")]


def test_tool_timeout_fails_a_read_only_call_and_the_run_goes_on() -> None:
    slow = RecordingTool(spec("slow"), delay=5)
    rig = make_rig(
        [reply("", call("slow", {"text": "x"}, "c1")), reply("gave up")],
        [slow],
        budget=Budget(tool_timeout_seconds=0.05),
    )
    s = run(rig.service.create_session())
    result = run(rig.service.send(s.id, "go"))
    assert result.run.status is RunStatus.COMPLETED
    assert shape(rig.history(s.id))[2] == (
        3,
        "tool_result",
        "c1",
        "failed",
        "timed out after 0.05 s",
    )
    assert slow.finished == []


def test_tool_timeout_of_a_side_effect_makes_the_outcome_unknown() -> None:
    slow = RecordingTool(spec("write", EffectClass.SIDE_EFFECT), delay=5)
    rig = make_rig(
        [reply("", call("write", {"text": "x"}, "c1"))],
        [slow],
        budget=Budget(tool_timeout_seconds=0.05),
    )
    s = run(rig.service.create_session())
    result = run(rig.service.send(s.id, "go"))
    assert result.run.status is RunStatus.AWAITING_RESOLUTION
    assert result.run.error is not None and result.run.error.code == "unknown_effect"
    # no result is stored until a person resolves it; the record says unknown
    assert [m[1] for m in shape(rig.history(s.id))] == ["user", "assistant"]
    (record,) = run(rig.store.get_executions(result.run.id))
    assert record.state is ExecutionState.STARTED
    assert record.result_status is ToolStatus.UNKNOWN
    assert record.note is not None and "timed out" in record.note
    # the session stays claimed: no new run (and no new side effect) until resolved
    with pytest.raises(SessionBusyError):
        run(rig.service.send(s.id, "again"))


def test_large_output_goes_to_an_artifact_and_the_model_sees_a_truncated_view() -> None:
    big = "line of output\n" * 2000  # 30,000 bytes
    tool = RecordingTool(spec("dump"), output=big)
    rig = make_rig(
        [reply("", call("dump", {"text": "x"}, "c1")), reply("ok")],
        [tool],
        budget=Budget(tool_output_cap_bytes=1000),
    )
    s = run(rig.service.create_session())
    run(rig.service.send(s.id, "go"))
    result = rig.history(s.id)[2].message
    assert result.kind == "tool_result"
    ref = result.result.artifact
    assert ref is not None and ref.size == len(big)
    assert len(result.result.content.encode()) <= 1000
    assert result.result.content.startswith("line of output\n")
    assert f"artifact {ref.id}" in result.result.content
    stored_ref, data = run(rig.store.get_artifact(ref.id))
    assert data.decode() == big and stored_ref == ref


def test_tool_errors_become_failed_results() -> None:
    boom = RecordingTool(spec("boom"), raises=ToolError("no such file: a.txt"))
    crash = RecordingTool(spec("crash"), raises=RuntimeError("bug"))
    rig = make_rig(
        [
            reply("", call("boom", {"text": "x"}, "c1"), call("crash", {"text": "y"}, "c2")),
            reply("sorry"),
        ],
        [boom, crash],
    )
    s = run(rig.service.create_session())
    result = run(rig.service.send(s.id, "go"))
    assert result.run.status is RunStatus.COMPLETED
    rows = shape(rig.history(s.id))
    assert rows[2] == (3, "tool_result", "c1", "failed", "no such file: a.txt")
    assert rows[3][:4] == (4, "tool_result", "c2", "failed")
    assert "RuntimeError: bug" in rows[3][4]


def test_model_error_fails_the_run_with_its_code() -> None:
    err = ModelError("prompt is too long", model_code="CONTEXT_WINDOW_EXCEEDED", status=400)
    rig = make_rig([err])
    s = run(rig.service.create_session())
    result = run(rig.service.send(s.id, "go"))
    assert result.run.status is RunStatus.FAILED
    assert result.run.error is not None
    assert result.run.error.code == "context_window_exceeded"
    assert "prompt is too long" in result.run.error.message


def test_cancel_during_a_tool_leaves_no_unpaired_call() -> None:
    started = asyncio.Event()

    async def wait_forever(inv: ToolInvocation) -> str:
        started.set()
        await asyncio.sleep(30)
        return "never"

    hang = RecordingTool(spec("hang"), fn=wait_forever)
    rig = make_rig(
        [reply("", call("hang", {"text": "1"}, "c1"), call("hang", {"text": "2"}, "c2"))], [hang]
    )
    s = run(rig.service.create_session())

    async def scenario() -> object:
        task = asyncio.create_task(rig.service.send(s.id, "go"))
        await started.wait()
        run_id = next(iter(rig.service._active))
        await rig.service.cancel(run_id)
        return await task

    result = run(scenario())
    assert result.run.status is RunStatus.CANCELLED  # type: ignore[attr-defined]
    rows = shape(rig.history(s.id))
    assert rows[2] == (3, "tool_result", "c1", "cancelled", "cancelled while running")
    assert rows[3] == (4, "tool_result", "c2", "cancelled", "not executed: the run was cancelled")
    assert run(rig.store.get_session(s.id)).active_run_id is None


def test_cancel_from_another_process_is_seen_at_the_next_commit() -> None:
    async def flag(inv: ToolInvocation) -> str:
        await rig.store.request_cancel(inv.run_id)  # as `plait runs cancel` would
        return "ok"

    tool = RecordingTool(spec("t"), fn=flag)
    rig = make_rig(
        [reply("", call("t", {"text": "1"}, "c1"), call("t", {"text": "2"}, "c2"))], [tool]
    )
    s = run(rig.service.create_session())
    result = run(rig.service.send(s.id, "go"))
    assert result.run.status is RunStatus.CANCELLED
    assert [r[3] for r in shape(rig.history(s.id))[2:]] == ["succeeded", "cancelled"]


def test_a_second_concurrent_send_is_refused_as_busy() -> None:
    gate = asyncio.Event()

    async def hold(req: ModelRequest) -> ModelResponse:
        await gate.wait()
        return reply("first answer")

    rig = make_rig([hold, reply("second answer")])
    s = run(rig.service.create_session())

    async def scenario() -> None:
        first = asyncio.create_task(rig.service.send(s.id, "one"))
        await asyncio.sleep(0)
        while not rig.turns.requests:  # noqa: ASYNC110 - polling a plain list
            await asyncio.sleep(0)
        with pytest.raises(SessionBusyError) as busy:
            await rig.service.send(s.id, "two")
        assert busy.value.details["session_id"] == s.id
        gate.set()
        await first
        await rig.service.send(s.id, "two")

    run(scenario())
    assert shape(rig.history(s.id)) == [
        (1, "user", "one"),
        (2, "assistant", "first answer", ()),
        (3, "user", "two"),
        (4, "assistant", "second answer", ()),
    ]


def test_observer_sees_every_saved_message_in_order() -> None:
    events: list[RunEvent] = []
    rig = make_rig([reply("", call("echo", {"text": "a"}, "c1")), reply("done")], [echo_tool()])
    s = run(rig.service.create_session())
    run(rig.service.send(s.id, "go", observer=events.append))
    saved = [e.stored.seq for e in events if isinstance(e, MessageSaved)]
    assert saved == [1, 2, 3, 4]


def test_bad_input_is_a_clear_error() -> None:
    rig = make_rig([])
    with pytest.raises(SessionNotFoundError):
        run(rig.service.send("ses_missing", "hi"))
    s = run(rig.service.create_session())
    with pytest.raises(ValidationError):
        run(rig.service.send(s.id, "   "))
    with pytest.raises(ConfigError):
        make_rig([], [echo_tool(), echo_tool()])


def test_idempotency_keys_are_stable_and_arguments_digested() -> None:
    echo = echo_tool()
    rig = make_rig([reply("", call("echo", {"text": "a"}, "c1")), reply("ok")], [echo])
    s = run(rig.service.create_session())
    result = run(rig.service.send(s.id, "go"))
    (record,) = run(rig.store.get_executions(result.run.id))
    from plait.application.service import idempotency_key

    assert record.idempotency_key == idempotency_key(s.id, result.run.id, "c1")
    assert echo.invocations[0].idempotency_key == record.idempotency_key
    expected = json.dumps({"text": "a"}, sort_keys=True, separators=(",", ":"))
    import hashlib

    assert record.args_digest == "sha256:" + hashlib.sha256(expected.encode()).hexdigest()


def test_a_new_session_is_not_read_and_a_message_appended_meanwhile_is_a_conflict() -> None:
    """An empty session's history is not read before its first run; a message another
    writer appends between the session read and the run's start makes the start a version
    conflict, and nothing of the run is written."""

    class Racing(MemoryStore):
        reads = 0

        async def read_messages(
            self, session_id: str, *, after: int = 0, limit: int | None = None
        ) -> list[StoredMessage]:
            self.reads += 1
            return await super().read_messages(session_id, after=after, limit=limit)

        async def start_run(self, commit: Commit) -> CommitResult:
            other = UserMessage(id="m-other", text="meanwhile", created_at=1.0)
            sid = commit.session_id
            await self.commit(Commit(session_id=sid, expected_version=0, messages=(other,)))
            return await super().start_run(commit)

    store = Racing()
    rig = make_rig([reply("never")], store=store)
    s = run(rig.service.create_session())
    with pytest.raises(ConflictError):
        run(rig.service.send(s.id, "hi"))
    assert store.reads == 0
    assert shape(rig.history(s.id)) == [(1, "user", "meanwhile")]
    assert run(store.list_runs(session_id=s.id)) == []
