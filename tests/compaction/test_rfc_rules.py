"""The RFC's and the article's rules in real runs (issue 21, items 1, 2, 5 and 6): the
post-step check after every successful step, cancel with final priority (also through a
summarizer call), no request over the window, and summarizer calls out of the run's
budget, checked before each call."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from plait.application.ports import (
    ModelCapabilities,
    ModelRequest,
    ModelResponse,
    RawToolCall,
    ToolInvocation,
)
from plait.application.service import AgentService
from plait.domain.compaction import CompactionSettings
from plait.domain.errors import LeaseLostError, ModelError, ValidationError
from plait.domain.runs import Budget, RunStatus
from plait.domain.summary import Constraint
from plait.domain.tools import EffectClass, ToolSpec
from plait.testing import FunctionModel, RecordingTool
from tests.compaction.conftest import run
from tests.compaction.test_loop import BIG, WINDOW, scripted, service, summaries
from tests.compaction.test_recovery import Recorder, agent_for

CAPS = ModelCapabilities(context_window=WINDOW, max_output_tokens=300, structured_output=True)


def _echo(k: int) -> ModelResponse:
    call = RawToolCall(id=f"c{k}", name="echo", arguments={"text": f"{k} {BIG}"})
    return ModelResponse(text="", tool_calls=(call,), model="fn")


def _echo_turns(n: int) -> list[dict[str, Any]]:
    return [
        {"tool_calls": [{"name": "echo", "arguments": {"text": f"{k} {BIG}"}}]} for k in range(n)
    ]


def _steps(request: ModelRequest) -> int:
    """How many assistant turns the request's context stands for (compacted ones too)."""
    n = sum(m.kind == "assistant" for m in request.context.items)
    compacted = request.context.compacted
    return n + (0 if compacted is None else compacted.omitted_assistant_messages)


# --- item 1: the post-step check after a final answer ---------------------------------------


def _two_runs(second_user: str, second_answer: dict[str, Any]) -> tuple[Any, Any, Any, Any]:
    """Run 1: three echo steps and "Done." (under the threshold); run 2: ``second_user``
    answered by ``second_answer`` (no calls); run 3: a short question. Returns run 2,
    run 3, the model and the store."""
    assistant = [
        *(
            {"tool_calls": [{"name": "echo", "arguments": {"text": f"{k} {BIG}"}}]}
            for k in range(3)
        ),
        {"text": "Done."},
        second_answer,
        {"text": "Fine."},
    ]
    model = scripted(assistant, [{"structured": {"goal": "echo"}}] * 2)

    async def go() -> tuple[Any, Any, Any, Any]:
        agent, store = service(model)
        session = await agent.create_session()
        first = await agent.send(session.id, "Echo a lot, please.")
        assert first.run.status is RunStatus.COMPLETED, first.run.error
        assert await store.list_summaries(session.id) == []  # under the threshold so far
        second = await agent.send(session.id, second_user)
        third = await agent.send(session.id, "Anything else?")
        return second, third, model, store

    return run(go())


def _compacted_after_the_answer(second: Any, third: Any, model: Any, store: Any) -> None:
    assert second.run.status is RunStatus.COMPLETED, second.run.error
    roles = [r.role for r in model.requests]
    # run 1: 4 assistant calls; run 2: its answer, then the summarizer (one call per
    # chunk); run 3: one call
    summarized = roles[5:-1]
    assert roles[:5] == ["assistant"] * 5 and roles[-1] == "assistant"
    assert summarized and set(summarized) == {"summarizer"}
    assert second.run.usage.model_calls == 1 + len(summarized)  # the run's calls
    assert len(run(store.list_summaries(second.run.session_id))) == 1
    # the next run's first request goes out compacted, under the threshold
    last = model.requests[-1]
    assert last.context.compacted is not None
    assert third.run.status is RunStatus.COMPLETED, third.run.error


def test_a_final_answer_that_reaches_the_threshold_is_compacted_before_the_run_ends() -> None:
    answer = {"text": "A" * 2_400}  # takes the context from ~2,000 to over 2,400 tokens
    _compacted_after_the_answer(*_two_runs("Summarize it.", answer))


def test_success_with_no_content_gets_the_post_step_check() -> None:
    answer = {"text": ""}  # an empty answer; the user's message crossed the threshold
    _compacted_after_the_answer(*_two_runs("B" * 2_400, answer))


def test_success_at_the_token_limit_gets_the_post_step_check() -> None:
    # the answer was cut at the model's 300 output tokens (max_output_tokens)
    answer = {"text": "C" * 1_200, "usage": {"input_tokens": 2_000, "output_tokens": 300}}
    _compacted_after_the_answer(*_two_runs("D" * 1_400, answer))


def test_a_final_answer_under_the_threshold_still_ends_the_run_in_one_commit() -> None:
    model = scripted([{"text": "Done."}], [])

    async def go() -> None:
        agent, store = service(model)
        commits = 0
        original = store.commit

        async def counting(commit: Any) -> Any:
            nonlocal commits
            commits += 1
            return await original(commit)

        store.commit = counting
        session = await agent.create_session()
        result = await agent.send(session.id, "hi")
        assert result.run.status is RunStatus.COMPLETED
        assert commits == 1  # the answer and the run's end: one commit

    run(go())


# --- item 2: cancel has final priority -------------------------------------------------------


class Blocking:
    """An assistant that calls echo with a large text every step, and a summarizer that
    waits until released (or interrupted: ``interrupted`` is then set)."""

    def __init__(self, *, overflow_at: int | None = None, answer: Callable[[], Any]) -> None:
        self.started = asyncio.Event()
        self.release = asyncio.Event()
        self.interrupted = False
        self.overflow_at = overflow_at
        self.answer = answer
        self.model = FunctionModel(self, name="fn", capabilities=CAPS)

    async def __call__(self, request: ModelRequest) -> ModelResponse:
        if request.role == "summarizer":
            self.started.set()
            try:
                await self.release.wait()
            except asyncio.CancelledError:
                self.interrupted = True
                raise
            result: ModelResponse = self.answer()
            return result
        step = _steps(request)
        if step == self.overflow_at:
            raise ModelError("prompt is too long", model_code="CONTEXT_WINDOW_EXCEEDED", status=400)
        return _echo(step) if step < 10 else ModelResponse(text="Done.", model="fn")


async def _cancel_when_summarizing(agent: AgentService, fake: Blocking) -> Any:
    session = await agent.create_session()
    task = asyncio.create_task(agent.send(session.id, "Echo a lot, please."))
    await fake.started.wait()
    (run_id,) = agent.driver.active
    await agent.cancel(run_id)
    for _ in range(5):  # let the cancel land (no time passes)
        await asyncio.sleep(0)
    interrupted = fake.interrupted
    fake.release.set()  # on main the summarizer only now finishes
    result = await task
    return interrupted, result


def test_a_cancel_interrupts_a_pressure_compactions_summarizer_call() -> None:
    fake = Blocking(answer=lambda: ModelResponse(structured={"goal": "echo"}, model="fn"))

    async def go() -> None:
        agent, store = service(fake.model)
        interrupted, result = await _cancel_when_summarizing(agent, fake)
        assert interrupted, "the summarizer call ran on after the cancel"
        assert result.run.status is RunStatus.CANCELLED, result.run.error
        assert await store.list_summaries(result.run.session_id) == []

    run(go())


def test_a_cancel_during_an_overflow_compaction_that_fails_ends_the_run_cancelled() -> None:
    fake = Blocking(overflow_at=3, answer=lambda: ModelResponse(text="not json", model="fn"))

    async def go() -> None:
        agent, _, _ = agent_for(fake.model, window=100_000)  # no pressure: the overflow
        interrupted, result = await _cancel_when_summarizing(agent, fake)
        assert interrupted
        assert result.run.status is RunStatus.CANCELLED, result.run.error
        assert result.run.error is not None and result.run.error.code == "cancelled"

    run(go())


def test_destroying_the_agent_during_a_compaction_writes_nothing_more() -> None:
    fake = Blocking(answer=lambda: ModelResponse(structured={"goal": "echo"}, model="fn"))

    async def go() -> None:
        agent, store = service(fake.model)
        session = await agent.create_session()
        task = asyncio.create_task(agent.send(session.id, "Echo a lot, please."))
        await fake.started.wait()
        (run_id,) = agent.driver.active
        before = len(await store.read_messages(session.id))
        assert agent.abandon(run_id)  # a worker shutting down
        with pytest.raises(LeaseLostError):  # the drive stops, writing nothing more
            await task
        assert fake.interrupted
        stored = await store.get_run(run_id)
        assert stored.status is RunStatus.RUNNING  # left for recovery, as it was
        assert len(await store.read_messages(session.id)) == before
        assert await store.list_summaries(session.id) == []

    run(go())


def test_destroying_the_agent_during_an_overflow_recovery_writes_nothing_more() -> None:
    fake = Blocking(overflow_at=3, answer=lambda: ModelResponse(text="not json", model="fn"))

    async def go() -> None:
        agent, store, _ = agent_for(fake.model, window=100_000)
        session = await agent.create_session()
        task = asyncio.create_task(agent.send(session.id, "Echo a lot, please."))
        await fake.started.wait()
        (run_id,) = agent.driver.active
        assert agent.abandon(run_id)
        with pytest.raises(LeaseLostError):  # the drive stops, writing nothing more
            await task
        assert fake.interrupted
        assert (await store.get_run(run_id)).status is RunStatus.RUNNING

    run(go())


def test_an_already_cancelled_run_never_starts_a_summarizer() -> None:
    asked: list[str] = []

    async def fn(request: ModelRequest) -> ModelResponse:
        asked.append(request.role)
        if request.role == "summarizer":
            return ModelResponse(structured={"goal": "echo"}, model="fn")
        return _echo(_steps(request))

    model = FunctionModel(fn, name="fn", capabilities=CAPS)

    async def go() -> None:
        agent, store = service(model)

        async def cancel_then_echo(inv: ToolInvocation) -> str:
            # `plait runs cancel` from another process: seen when this result is saved
            await store.request_cancel(inv.run_id)
            return str(inv.call.arguments().get("text", ""))

        spec = ToolSpec(
            name="echo", description="echo", parameters={"type": "object"},
            effect=EffectClass.READ_ONLY,
        )  # fmt: skip
        tool = RecordingTool(spec, fn=cancel_then_echo)
        agent.driver.tools = {"echo": tool.tool}
        session = await agent.create_session()
        # the first step's result takes the context over the threshold
        result = await agent.send(session.id, "E" * 8_000)
        assert result.run.status is RunStatus.CANCELLED, result.run.error
        assert asked == ["assistant"]  # no summarizer call was started
        assert await store.list_summaries(session.id) == []

    run(go())


# --- item 5: a request measured over the window is never sent --------------------------------


def test_a_context_over_the_window_is_not_sent() -> None:
    model = scripted([{"text": "never asked"}], [], window=10_000)

    async def go() -> None:
        agent, store = service(model, window=10_000)
        session = await agent.create_session()
        # a message that alone is over the window: refused before it is written (issue 26)
        with pytest.raises(ValidationError, match="cannot fit model") as refused:
            await agent.send(session.id, "F" * 43_600)  # ~10,900 tokens (chars / 4)
        assert refused.value.details["tokens"] == 10_900
        assert await store.read_messages(session.id) == []
        assert await store.list_runs(session_id=session.id) == []
        # one that fits alone but not with the instructions and tools: sent to no model
        result = await agent.send(session.id, "F" * 39_990)
        assert result.run.status is RunStatus.FAILED
        error = result.run.error
        assert error is not None and error.code == "context_budget_insufficient"
        assert "10000-token context window" in error.message
        assert "it was not sent" in error.message
        assert model.requests == []
        assert len(await store.read_messages(session.id)) == 1  # the user's message is kept

    run(go())


def test_an_over_window_context_is_compacted_before_the_call() -> None:
    assistant = [
        *(
            {"tool_calls": [{"name": "echo", "arguments": {"text": f"{k} {BIG}"}}]}
            for k in range(3)
        ),
        {"text": "Done."},
        {"text": "Read it."},
    ]
    model = scripted(assistant, summaries(1))

    async def go() -> None:
        agent, store = service(model)
        session = await agent.create_session()
        await agent.send(session.id, "Echo a lot, please.")  # ~2,000 tokens, no compaction
        assert await store.list_summaries(session.id) == []
        # a message that takes the next context over the 3,000-token window by itself
        result = await agent.send(session.id, "G" * 4_400)
        assert result.run.status is RunStatus.COMPLETED, result.run.error
        last = model.requests[-1]
        assert last.role == "assistant" and last.context.compacted is not None
        assert [r.role for r in model.requests][-2:] == ["summarizer", "assistant"]

    run(go())


def test_the_raw_history_is_used_when_only_it_fits() -> None:
    model = scripted([{"text": "ok"}], [], window=10_000)

    async def go() -> None:
        agent, store = service(model, window=10_000)
        session = await agent.create_session()
        # a constraint record large enough that the preamble takes the context over
        big = Constraint(text="never " + "H" * 12_000, source_message_id="msg_x")
        await store.add_constraints(session.id, [big])
        result = await agent.send(session.id, "I" * 30_000)  # ~7,500 tokens
        assert result.run.status is RunStatus.COMPLETED, result.run.error
        request = model.requests[0]
        assert request.role == "assistant"
        assert [m.kind for m in request.context.items] == ["user"]  # no preamble
        assert request.context.items[0].text == "I" * 30_000  # type: ignore[union-attr]

    run(go())


# --- item 6: summarizer calls come out of the run's budget -----------------------------------


def _pressured(budget: Budget) -> tuple[Any, Any]:
    model = scripted(
        [{"tool_calls": [{"name": "echo", "arguments": {"text": "x" * 6_000}}]}, {"text": "Done."}],
        summaries(2),
    )

    async def go() -> Any:
        agent, _ = service(model)
        session = await agent.create_session()
        return await agent.send(session.id, "Echo this.", budget=budget)

    return run(go()), model


def test_max_model_calls_counts_summarizer_calls_before_they_are_made() -> None:
    result, model = _pressured(Budget(max_model_calls=1))
    assert [r.role for r in model.requests] == ["assistant"]  # on main: + 2 summarizer
    assert result.run.status is RunStatus.BUDGET_EXHAUSTED
    assert result.run.error is not None and result.run.error.code == "max_model_calls"
    assert result.run.usage.model_calls == 1


def test_a_summarizer_call_within_the_budget_is_charged_to_the_run() -> None:
    result, model = _pressured(Budget(max_model_calls=2))
    assert [r.role for r in model.requests] == ["assistant", "summarizer"]
    assert result.run.status is RunStatus.BUDGET_EXHAUSTED  # the next step has no call left
    assert result.run.usage.model_calls == 2


def test_a_spent_budget_skips_the_compaction_after_a_final_answer_and_completes() -> None:
    model = scripted([{"text": "J" * 10_000}], [])  # over the threshold once saved
    recorder = Recorder()

    async def go() -> Any:
        agent, _ = service(model, settings=CompactionSettings(summary_max_tokens=300))
        session = await agent.create_session()
        result = await agent.send(
            session.id, "K" * 400, budget=Budget(max_model_calls=1), observer=recorder
        )
        assert result.run.status is RunStatus.COMPLETED, result.run.error
        assert [r.role for r in model.requests] == ["assistant"]
        skipped = [c for c in recorder.compactions() if c[0] == "skipped"]
        assert skipped == [("skipped", "pressure", 1)]

    run(go())


# --- item 3: the same rule in recovery -------------------------------------------------------


def test_a_recovered_run_whose_model_has_no_window_fails_before_any_call() -> None:
    from plait.adapters.stores.memory.store import MemoryStore
    from plait.application.compaction import CompactionService, ModelProfile, ModelProfiles
    from plait.testing import CharMeter, FixedClock, SequentialIds, echo_tool
    from tests.application.test_recovery import Died, die_at

    store = MemoryStore()

    def agent(model: Any, profiles: ModelProfiles, **kw: Any) -> AgentService:
        ids = SequentialIds()
        compaction = CompactionService(
            store=store, profiles=profiles, summarizer=model, clock=FixedClock(), ids=ids
        )
        return AgentService.build(
            store=store, artifacts=store, model=model, tools=[echo_tool().tool],
            clock=FixedClock(), ids=ids, compaction=compaction, **kw,
        )  # fmt: skip

    async def go() -> None:
        first = scripted([{"text": "never asked"}], [])
        known = ModelProfiles(
            [ModelProfile(model=first.name, meter=CharMeter(), context_window=WINDOW)]
        )
        dying = agent(first, known, checkpoint=die_at("user_saved"))
        session = await dying.create_session()
        with pytest.raises(Died):
            await dying.send(session.id, "hello")
        (crashed,) = await store.list_runs()
        second = scripted([{"text": "never asked"}], [], window=None)
        windowless = ModelProfiles([], without_window=[second.name])
        again = agent(second, windowless)
        again.owner = "worker-2"
        (report,) = await again.recover(run_id=crashed.id, force=True)
        assert report.result is not None
        ended = report.result.run
        assert ended.status is RunStatus.FAILED
        assert ended.error is not None and ended.error.code == "token_meter_model_unconfigured"
        assert second.requests == []

    run(go())


def test_a_cancel_while_a_final_answers_summary_is_activated_ends_the_run_cancelled() -> None:
    """Whatever finishes concurrently: the cancel arrives while the summary is stored (no
    call to interrupt), the compaction completes, and the run still ends cancelled."""
    model = scripted(
        [*_echo_turns(3), {"text": "Done."}, {"text": "A" * 2_400}],
        [{"structured": {"goal": "echo"}}] * 2,
    )

    async def go() -> None:
        agent, store = service(model)
        original = store.activate_summary

        async def activate_and_cancel(summary: Any, **kw: Any) -> Any:
            (run_id,) = agent.driver.active
            await agent.cancel(run_id)
            return await original(summary, **kw)

        session = await agent.create_session()
        await agent.send(session.id, "Echo a lot, please.")
        store.activate_summary = activate_and_cancel
        result = await agent.send(session.id, "Summarize it.")
        assert result.run.status is RunStatus.CANCELLED, result.run.error
        assert len(await store.list_summaries(session.id)) == 1  # the compaction finished

    run(go())


def test_a_crash_in_a_final_answers_post_step_check_is_recovered_without_a_new_answer() -> None:
    """The answer was saved (the run still running) and the process died before the check
    ran: recovery runs the check and completes the run; the model is not asked again."""
    from plait.adapters.stores.memory.store import MemoryStore
    from plait.application.compaction import CompactionService, ModelProfile, ModelProfiles
    from plait.testing import CharMeter, FixedClock, SequentialIds, echo_tool
    from tests.application.test_recovery import Died, die_at

    store = MemoryStore()

    def agent(model: Any, **kw: Any) -> AgentService:
        ids = SequentialIds(start=kw.pop("start", 1))
        profile = ModelProfile(model=model.name, meter=CharMeter(), context_window=WINDOW)
        compaction = CompactionService(
            store=store, profiles=ModelProfiles([profile]), summarizer=model,
            clock=FixedClock(), ids=ids, settings=CompactionSettings(summary_max_tokens=300),
        )  # fmt: skip
        return AgentService.build(
            store=store, artifacts=store, model=model, tools=[echo_tool().tool],
            clock=FixedClock(), ids=ids, compaction=compaction, **kw,
        )  # fmt: skip

    async def go() -> None:
        first = scripted([{"text": "A" * 2_400}], [])
        dying = agent(first, checkpoint=die_at("assistant_saved"))
        session = await dying.create_session()
        with pytest.raises(Died):  # the answer takes the context over the threshold
            await dying.send(session.id, "L" * 8_000)
        (crashed,) = await store.list_runs()
        assert crashed.status is RunStatus.RUNNING
        second = scripted([], [{"structured": {"goal": "answer"}}])
        again = agent(second, start=1_000)
        again.owner = "worker-2"
        (report,) = await again.recover(run_id=crashed.id, force=True)
        assert report.result is not None
        assert report.result.run.status is RunStatus.COMPLETED, report.result.run.error
        assert [r.role for r in second.requests] == ["summarizer"]  # no second answer
        kinds = [sm.message.kind for sm in await store.read_messages(session.id)]
        assert kinds == ["user", "assistant"]
        assert len(await store.list_summaries(session.id)) == 1

    run(go())
