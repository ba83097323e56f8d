"""The RFC's overflow recovery inside real runs: a ``CONTEXT_WINDOW_EXCEEDED`` (thrown, or
in the stream of a real adapter talking to a fake provider) closes the failed step; one
shrinking compaction; a retry as a NEW step only when the summary generation increased;
attempts capped; otherwise the provider's error is reported unchanged. And the run events
each compaction produces."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest

from plait.adapters.stores.memory.store import MemoryStore
from plait.application.compaction import (
    CompactionOutcome,
    CompactionService,
    ModelProfile,
    ModelProfiles,
)
from plait.application.events import CompactionEvent, ModelCallStarted, RunEvent
from plait.application.ports import ModelClient
from plait.application.service import AgentService
from plait.domain.compaction import CompactionSettings
from plait.domain.messages import AssistantMessage
from plait.domain.runs import RunStatus
from plait.testing import (
    CharMeter,
    FixedClock,
    ScriptedModel,
    SequentialIds,
    echo_tool,
)
from plait.testing.fake_providers import FakeProvider, FakeTurn, Reply
from tests.compaction.conftest import run
from tests.compaction.test_loop import echo_turns, scripted, summaries, summary

BIG_WINDOW = 100_000  # no pressure: only overflows compact
OVERFLOW = {"error": "context_window_exceeded"}
SETTINGS = CompactionSettings(summary_max_tokens=300)


def with_overflows(*at: int, calls: int = 3) -> list[Any]:
    """``echo_turns(calls)`` with an overflow error inserted before the turns ``at``."""
    turns = echo_turns(calls)
    for k in sorted(at, reverse=True):
        turns.insert(k, OVERFLOW)
    return turns


class Recorder:
    def __init__(self) -> None:
        self.events: list[RunEvent] = []

    def __call__(self, event: RunEvent) -> None:
        self.events.append(event)

    def steps(self) -> list[tuple[int, int]]:
        return [(e.step, e.attempt) for e in self.events if isinstance(e, ModelCallStarted)]

    def compactions(self) -> list[tuple[str, str, int]]:
        return [(e.phase, e.trigger, e.step) for e in self.events if isinstance(e, CompactionEvent)]


def agent_for(
    model: ModelClient,
    *,
    summarizer: ModelClient | None = None,
    settings: CompactionSettings = SETTINGS,
    window: int = BIG_WINDOW,
    compaction: bool = True,
) -> tuple[AgentService, MemoryStore, CompactionService]:
    store = MemoryStore()
    ids = SequentialIds()
    profile = ModelProfile(
        model=model.name, meter=CharMeter(), context_window=window, max_output_tokens=300
    )
    profiles = ModelProfiles([profile])
    if summarizer is not None:
        profiles.add(replace(profile, model=summarizer.name, context_window=50_000))
    service = CompactionService(
        store=store,
        profiles=profiles,
        summarizer=summarizer or model,
        clock=FixedClock(),
        ids=ids,
        settings=settings,
    )
    agent = AgentService.build(
        store=store,
        artifacts=store,
        model=model,
        tools=[echo_tool().tool],
        clock=FixedClock(),
        ids=ids,
        compaction=service if compaction else None,
    )
    return agent, store, service


async def send(agent: AgentService, recorder: Recorder, **kw: Any) -> tuple[str, Any]:
    session = await agent.create_session()
    result = await agent.send(session.id, "Echo a lot, please.", observer=recorder, **kw)
    return session.id, result


def test_a_thrown_overflow_closes_the_step_and_retries_as_a_new_step() -> None:
    model = scripted(with_overflows(3), [summary()], window=BIG_WINDOW)
    rec = Recorder()

    async def go() -> None:
        agent, store, _ = agent_for(model)
        sid, result = await send(agent, rec)
        assert result.run.status is RunStatus.COMPLETED, result.run.error
        # step 4 failed; the retry is step 5, first attempt
        assert rec.steps() == [(1, 1), (2, 1), (3, 1), (4, 1), (5, 1)]
        assert rec.compactions() == [("started", "overflow", 4), ("activated", "overflow", 4)]
        activated = [e for e in rec.events if isinstance(e, CompactionEvent)][-1]
        assert activated.generation == 1 and activated.covered_through_seq is not None
        stored = [sm.message for sm in await store.read_messages(sid)]
        assistants = [m for m in stored if isinstance(m, AssistantMessage)]
        assert [m.step for m in assistants] == [1, 2, 3, 5]  # the failed step left no message
        assert result.run.usage.steps == 5
        asked = [r for r in model.requests if r.role == "assistant"]
        assert asked[3].context.compacted is None and asked[4].context.compacted is not None
        roles = [r.role for r in model.requests]
        assert roles.index("summarizer") == 4  # between the failed request and the retry

    run(go())


class _OverflowInStream(FakeProvider):
    """Answers the ``at``-th request with a stream that starts, shows some text, then
    fails in-band with the provider's context-length error."""

    def __init__(self, turns: list[FakeTurn], at: int) -> None:
        super().__init__("openai-responses", turns)
        self.at = at
        self.asked = 0

    def _reply(self, request: Any) -> Reply:
        self.asked += 1
        if self.asked != self.at:
            return super()._reply(request)
        started = {"id": "resp_x", "object": "response", "status": "in_progress", "output": []}
        failed = {
            "id": "resp_x",
            "status": "failed",
            "error": {
                "code": "context_length_exceeded",
                "message": "Your input exceeds the context window of this model.",
            },
        }
        events: tuple[tuple[str | None, Any], ...] = (
            ("response.created", {"type": "response.created", "response": started}),
            ("response.output_text.delta", {"type": "response.output_text.delta",
             "item_id": "m", "output_index": 0, "delta": "Let me "}),
            ("response.failed", {"type": "response.failed", "response": failed}),
        )  # fmt: skip
        return Reply(events=events)


@pytest.mark.slow
def test_an_in_stream_overflow_from_a_real_adapter_is_recovered_the_same_way() -> None:
    from tests.adapters._clients import client_for

    calls = [
        FakeTurn(calls=((f"call_{k}", "echo", {"text": f"{k} " + "x" * 1_200}),)) for k in range(3)
    ]
    turns = [*calls, FakeTurn(text="Done.")]
    summarizer = ScriptedModel(
        {"version": 1, "capabilities": {"context_window": 50_000}, "summarizer": [summary()]},
        name="summarizer",
    )
    rec = Recorder()
    shown: list[str] = []

    async def go(fake: _OverflowInStream) -> None:
        model = client_for("openai-responses", fake.base_url)
        agent, store, _ = agent_for(model, summarizer=summarizer)
        sid, result = await send(agent, rec, on_text=shown.append)
        assert result.run.status is RunStatus.COMPLETED, result.run.error
        assert "Let me " in shown  # it really failed mid-stream
        assert rec.steps() == [(1, 1), (2, 1), (3, 1), (4, 1), (5, 1)]
        assert rec.compactions() == [("started", "overflow", 4), ("activated", "overflow", 4)]
        assert len(await store.list_summaries(sid)) == 1
        # the retried request was rebuilt from the compacted surface: it is smaller
        sizes = [len(json.dumps(r.body)) for r in fake.requests]
        assert sizes[4] < sizes[3]

    fake = _OverflowInStream(turns, at=4)
    with fake:
        run(go(fake))


def test_without_anything_to_compact_the_provider_error_is_reported_unchanged() -> None:
    async def failing(compaction: bool) -> Any:
        model = scripted([OVERFLOW], [summary()], window=BIG_WINDOW)
        agent, store, _ = agent_for(model, compaction=compaction)
        rec = Recorder()
        sid, result = await send(agent, rec)
        return result.run, rec, model, await store.list_summaries(sid)

    async def go() -> None:
        with_c, rec, model, summaries = await failing(True)
        without, _, _, _ = await failing(False)
        assert with_c.status is RunStatus.FAILED
        assert with_c.error == without.error  # the same code and message as with no compaction
        assert with_c.error is not None and with_c.error.code == "context_window_exceeded"
        assert summaries == [] and [r.role for r in model.requests] == ["assistant"]
        assert rec.compactions() == [("skipped", "overflow", 1)]
        assert rec.steps() == [(1, 1)]

    run(go())


def test_a_compaction_that_did_not_raise_the_generation_authorizes_no_retry() -> None:
    model = scripted(with_overflows(3), [summary()], window=BIG_WINDOW)
    rec = Recorder()

    async def claims_success(*a: Any, **kw: Any) -> CompactionOutcome:
        # a backend that reports success without replacing the model-visible surface
        return CompactionOutcome(
            status="compacted",
            detail="(claimed)",
            trigger="overflow",
            generation_before=0,
            generation_after=1,
        )

    async def go() -> None:
        agent, store, service = agent_for(model)
        service.on_overflow = claims_success  # type: ignore[method-assign]
        sid, result = await send(agent, rec)
        assert result.run.status is RunStatus.FAILED
        assert result.run.error is not None and result.run.error.code == "context_window_exceeded"
        assert await store.list_summaries(sid) == []
        assert rec.steps() == [(1, 1), (2, 1), (3, 1), (4, 1)]  # no retry

    run(go())


def test_recovery_that_raises_leaves_the_provider_error() -> None:
    model = scripted(with_overflows(3), [summary()], window=BIG_WINDOW)
    rec = Recorder()

    async def go() -> None:
        agent, store, _ = agent_for(model)

        async def broken(*a: Any, **kw: Any) -> None:
            raise RuntimeError("disk on fire")

        store.activate_summary = broken  # type: ignore[method-assign]
        _, result = await send(agent, rec)
        assert result.run.status is RunStatus.FAILED
        assert result.run.error is not None and result.run.error.code == "context_window_exceeded"
        assert rec.compactions() == [
            ("started", "overflow", 4),
            ("failed", "overflow", 4),
        ]
        failed = [e for e in rec.events if isinstance(e, CompactionEvent)][-1]
        assert "disk on fire" in failed.detail

    run(go())


def test_consecutive_overflow_recoveries_are_capped() -> None:
    # two overflows in a row with no successful request between them
    model = scripted(with_overflows(3, 3), [summary(), summary()], window=BIG_WINDOW)
    rec = Recorder()

    async def go() -> None:
        agent, store, _ = agent_for(model)
        sid, result = await send(agent, rec)
        assert result.run.status is RunStatus.FAILED
        assert result.run.error is not None and result.run.error.code == "context_window_exceeded"
        assert len([r for r in model.requests if r.role == "summarizer"]) == 1
        assert rec.steps() == [(1, 1), (2, 1), (3, 1), (4, 1), (5, 1)]
        assert len(await store.list_summaries(sid)) == 1

    run(go())


def test_a_successful_request_resets_the_attempts() -> None:
    # overflow at step 4 and again at step 7: each is one attempt
    later = {"structured": {"goal": "echo more"}}  # cites nothing outside its new range
    model = scripted(with_overflows(3, 5, calls=5), [summary(), later], window=BIG_WINDOW)
    rec = Recorder()

    async def go() -> None:
        agent, store, _ = agent_for(model)
        sid, result = await send(agent, rec)
        assert result.run.status is RunStatus.COMPLETED, result.run.error
        assert [s for s in await store.list_summaries(sid)][-1].generation == 2
        assert [c for c in rec.compactions() if c[0] == "activated"] == [
            ("activated", "overflow", 4),
            ("activated", "overflow", 7),
        ]

    run(go())


def test_zero_overflow_retries_disables_only_the_recovery() -> None:
    model = scripted(with_overflows(3), [summary()], window=BIG_WINDOW)
    rec = Recorder()

    async def go() -> None:
        agent, _, _ = agent_for(model, settings=replace(SETTINGS, max_overflow_retries=0))
        _, result = await send(agent, rec)
        assert result.run.error is not None and result.run.error.code == "context_window_exceeded"
        assert [r.role for r in model.requests].count("summarizer") == 0
        assert rec.compactions() == []

    run(go())


def test_auto_off_registers_nothing_not_even_events() -> None:
    pressure = scripted(echo_turns(10), [])
    overflowing = scripted(with_overflows(3), [], window=BIG_WINDOW)

    async def go() -> None:
        off = replace(SETTINGS, auto=False)
        for model, window in ((pressure, 3_000), (overflowing, BIG_WINDOW)):
            rec = Recorder()
            agent, store, _ = agent_for(model, settings=off, window=window)
            sid, _ = await send(agent, rec)
            assert rec.compactions() == []
            assert all(r.role == "assistant" for r in model.requests)
            assert await store.list_summaries(sid) == []

    run(go())


def test_pressure_after_a_step_reports_started_then_activated() -> None:
    model = scripted(echo_turns(10), summaries(4))
    rec = Recorder()

    async def go() -> None:
        agent, store, _ = agent_for(model, window=3_000)
        sid, result = await send(agent, rec)
        assert result.run.status is RunStatus.COMPLETED, result.run.error
        events = [e for e in rec.events if isinstance(e, CompactionEvent)]
        assert events and events[0].phase == "started" and events[0].trigger == "pressure"
        activated = [e for e in events if e.phase == "activated"]
        assert len(activated) == len(await store.list_summaries(sid))
        first = activated[0]
        assert first.tokens_before is not None and first.tokens_after is not None
        assert first.tokens_after < first.tokens_before
        # reported after the step whose results pushed it over, before the next step
        i = rec.events.index(first)
        following = rec.events[i + 1]
        assert isinstance(following, ModelCallStarted) and following.step == first.step + 1

    run(go())


def test_a_post_step_compaction_that_raises_is_reported_and_the_run_goes_on() -> None:
    model = scripted(echo_turns(4), summaries(4))  # over 0.8 after step 4, under the window
    rec = Recorder()

    async def go() -> None:
        agent, store, _ = agent_for(model, window=3_000)

        async def broken(*a: Any, **kw: Any) -> None:
            raise RuntimeError("disk on fire")

        store.activate_summary = broken  # type: ignore[method-assign]
        sid, result = await send(agent, rec)
        assert result.run.status is RunStatus.COMPLETED, result.run.error
        failed = [e for e in rec.events if isinstance(e, CompactionEvent) and e.phase == "failed"]
        assert failed and "disk on fire" in failed[0].detail
        assert failed[0].trigger == "pressure"
        assert await store.list_summaries(sid) == []
        assert len(await store.read_messages(sid)) == 1 + 4 * 2 + 1  # nothing lost

    run(go())
