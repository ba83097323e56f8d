"""The RFC's defaults, pinned by behaviour (issue 21, item 4): the post-step trigger at
exactly 0.8 of the window (``>=``), the retained tail ``floor(0.16 × window)``, summaries
of at most 8,192 tokens, an empty summarizer model meaning the session's model, and the
summary recording the model that actually answered."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from plait.adapters.stores.memory.store import MemoryStore
from plait.application.compaction import RunCompaction
from plait.application.ports import ModelCapabilities, ModelRequest, ModelResponse
from plait.domain.compaction import CompactionSettings
from plait.domain.messages import AssistantMessage, Message, UserMessage
from plait.domain.session import Session
from plait.testing import CharMeter, FixedClock, FunctionModel, SequentialIds
from tests.compaction.conftest import MODEL, Bench, good_summary, run, scripted

EXACT = CharMeter(chars_per_token=1, per_message=0)  # one token per character


def _bench(window: int, summaries: int = 1) -> Bench:
    """Default settings, a model of ``window`` tokens, a summarizer with room to spare."""
    return Bench(
        scripted([good_summary()] * summaries, window=200_000),
        settings=CompactionSettings(),
        meter=CharMeter(chars_per_token=1, per_message=0),
        window=window,
    )


async def _seed_to(bench: Bench, total: int, extra: list[Message] | None = None) -> None:
    """A history (request m1, answer m2, and ``extra``) whose next context measures
    exactly ``total`` tokens."""

    def history(filler: int, tag: str = "m") -> list[Message]:
        # counts are cached by message id: the probe's messages have ids of their own
        return [
            UserMessage(id=f"{tag}1", text="a" * 4_000, created_at=1.0),
            AssistantMessage(id=f"{tag}2", text="b" * filler, created_at=2.0, model=MODEL),
            *(extra or []),
        ]

    await bench.store.create_session(Session(id="probe", created_at=0.0))
    probe = await bench.service.view(
        "probe", history(0, "p"), model=MODEL, instructions="", tools=()
    )
    await bench.store.create_session(Session(id="s1", created_at=0.0))
    await bench.append(history(total - probe.tokens.total))


async def _after_step(bench: Bench) -> Any:
    return await bench.service.after_step(
        "s1", await bench.messages(), run=RunCompaction(), instructions="", tools=()
    )


@pytest.mark.parametrize(
    ("window", "below", "at"),
    [
        (10_000, 7_999, 8_000),  # 0.8 × 10,000 = 8,000: reached at 8,000 (>=)
        (10_001, 8_000, 8_001),  # 0.8 × 10,001 = 8,000.8: 8,000 is below it
    ],
)
def test_the_post_step_trigger_is_at_exactly_0_8_of_the_window(
    window: int, below: int, at: int
) -> None:
    async def go() -> None:
        under = _bench(window)
        await _seed_to(under, below)
        assert await _after_step(under) is None  # measured, not compacted
        over = _bench(window)
        await _seed_to(over, at)
        outcome = await _after_step(over)
        assert outcome is not None and outcome.status == "compacted", outcome
        assert outcome.measured_tokens == at and outcome.threshold_tokens == at

    run(go())


def test_the_retained_tail_is_floor_of_0_16_of_the_window() -> None:
    """floor(0.16 × 10,001) = 1,600 while ceil gives 1,601: a tail of 1,601 tokens is
    too long to keep whole, so the summary covers one more message."""

    async def go() -> None:
        bench = _bench(10_001)
        extra: list[Message] = [
            UserMessage(id="m3", text="c", created_at=3.0),  # 1 token
            AssistantMessage(id="m4", text="d" * 1_600, created_at=4.0, model=MODEL),
        ]
        await _seed_to(bench, 8_500, extra)
        assert CompactionSettings().retained_for(10_001) == 1_600
        outcome = await bench.service.compact("s1", trigger="manual", model=MODEL)
        assert outcome.status == "compacted", outcome
        assert outcome.summary is not None
        # kept raw: m4 (1,600 tokens); with a 1,601 tail m3 would stay raw too
        assert outcome.summary.covered_through_seq == 3

    run(go())


def test_a_summary_asks_for_at_most_8192_output_tokens() -> None:
    async def go() -> None:
        bench = _bench(10_000)
        await _seed_to(bench, 8_500)
        outcome = await bench.service.compact("s1", trigger="manual", model=MODEL)
        assert outcome.status == "compacted", outcome
        requests = bench.summarizer.requests  # type: ignore[attr-defined]
        assert [r.max_output_tokens for r in requests] == [8_192]

    run(go())


def test_an_empty_summarizer_model_means_the_sessions_model(tmp_path: Path) -> None:
    from plait.runtime import Runtime

    assert CompactionSettings().summarizer_model == ""
    model = FunctionModel(lambda r: ModelResponse(text="hi"), name="session-model")
    store = MemoryStore()
    runtime = Runtime(
        store=store, artifacts=store, model=model, tools=(), clock=FixedClock(),
        ids=SequentialIds(), compaction=CompactionSettings(),
    )  # fmt: skip
    assert runtime.compaction is not None
    assert runtime.compaction.summarizer is model
    script = tmp_path / "other.json"
    script.write_text('{"version": 1, "model": "other", "summarizer": []}', encoding="utf-8")
    other = Runtime(
        store=store, artifacts=store, model=model, tools=(), clock=FixedClock(),
        ids=SequentialIds(), compaction=CompactionSettings(summarizer_model=f"scripted:{script}"),
    )  # fmt: skip
    assert other.compaction is not None
    assert other.compaction.summarizer is not None
    assert other.compaction.summarizer.name == "scripted:other"  # the one configured


def test_the_summary_records_the_model_that_answered_not_the_one_asked() -> None:
    """The RFC: ``compact/summary.model`` is the model after dispatch (a router or proxy
    may answer with another model than the one named)."""

    def routed(request: ModelRequest) -> ModelResponse:
        return ModelResponse(structured=good_summary(), model="provider-model-2026-01")

    async def go() -> None:
        summarizer = FunctionModel(
            routed, name="alias", capabilities=ModelCapabilities(context_window=200_000)
        )
        bench = Bench(summarizer, settings=CompactionSettings(), meter=EXACT, window=10_000)
        await _seed_to(bench, 8_500)
        outcome = await bench.service.compact("s1", trigger="manual", model=MODEL)
        assert outcome.summary is not None, outcome
        assert outcome.summary.model == "provider-model-2026-01"
        stored = await bench.store.get_summary("s1")
        assert stored is not None and stored.model == "provider-model-2026-01"

    run(go())
