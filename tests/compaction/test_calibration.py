"""The meter is calibrated by the input tokens the provider reports: a meter that
under-counts is corrected upwards before the threshold check, one that over-counts is left
conservative. Real adapter, fake provider server."""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace
from typing import Any

import pytest

from plait.adapters.stores.memory.store import MemoryStore
from plait.application.compaction import CompactionService, ModelProfile, ModelProfiles
from plait.application.compaction._calibration import MAX_RATIO, Calibration
from plait.application.service import AgentService
from plait.domain.compaction import CompactionSettings
from plait.domain.runs import RunStatus
from plait.testing import CharMeter, FixedClock, ScriptedModel, SequentialIds, echo_tool
from plait.testing.fake_providers import FakeProvider, FakeTurn, Reply
from tests.compaction.test_loop import summary

WINDOW = 4_000


def test_calibration_follows_larger_reports_only() -> None:
    c = Calibration(window=3)
    assert c.factor == 1.0 and c.correct(100) == 100
    c.observe(100, 0)  # no usage reported: nothing learned
    c.observe(0, 50)
    assert c.samples == 0
    c.observe(100, 50)  # the meter over-counts: stays conservative
    assert c.factor == 1.0
    c.observe(100, 150)
    assert c.factor == 1.5 and c.correct(100) == 150
    c.observe(1, 1_000)  # absurd: capped
    assert c.factor == MAX_RATIO
    for _ in range(3):  # old samples age out
        c.observe(100, 110)
    assert c.factor == 1.1


class Reporting(FakeProvider):
    """Reports ``input_tokens`` as the request body's size divided by ``chars_per_token``
    (a provider whose tokenizer counts differently from plait's meter)."""

    def __init__(self, turns: list[FakeTurn], chars_per_token: int) -> None:
        super().__init__("openai", turns)
        self.cpt = chars_per_token

    def _reply(self, request: Any) -> Reply:
        if self.served < len(self._turns):
            size = len(json.dumps(request.body))
            self._turns[self.served] = replace(
                self._turns[self.served], input_tokens=size // self.cpt
            )
        return super()._reply(request)


def _run(chars_per_token: int) -> tuple[Any, int, ModelProfile]:
    from tests.adapters._clients import client_for

    turns = [
        FakeTurn(calls=((f"call_{k}", "echo", {"text": f"{k} " + "x" * 1_200}),)) for k in range(5)
    ]
    turns.append(FakeTurn(text="Done."))
    fake = Reporting(turns, chars_per_token)
    summarizer = ScriptedModel(
        {
            "version": 1,
            "capabilities": {"context_window": 50_000},
            "summarizer": [summary()] + [{"structured": {"goal": "echo"}}] * 8,
        },
        name="summarizer",
    )

    async def go() -> tuple[Any, int, ModelProfile]:
        model = client_for("openai", fake.base_url)
        meter = CharMeter(chars_per_token=8)  # counts about half of what a tokenizer would
        profile = ModelProfile(
            model=model.name, meter=meter, context_window=WINDOW, max_output_tokens=300
        )
        sprofile = replace(profile, model="summarizer", context_window=50_000)
        store = MemoryStore()
        ids = SequentialIds()
        compaction = CompactionService(
            store=store,
            profiles=ModelProfiles([profile, sprofile]),
            summarizer=summarizer,
            clock=FixedClock(),
            ids=ids,
            settings=CompactionSettings(summary_max_tokens=300),
        )
        agent = AgentService.build(
            store=store, artifacts=store, model=model, tools=[echo_tool().tool],
            clock=FixedClock(), ids=ids, compaction=compaction,
        )  # fmt: skip
        session = await agent.create_session()
        result = await agent.send(session.id, "Echo a lot, please.")
        return result.run, len(await store.list_summaries(session.id)), profile

    with fake:
        return asyncio.run(go())


@pytest.mark.slow
def test_a_meter_that_under_counts_is_corrected_before_the_threshold_check() -> None:
    under, summaries, profile = _run(chars_per_token=2)  # the provider counts ~4x more
    assert under.status is RunStatus.COMPLETED, under.error
    assert profile.calibration.samples >= 1 and profile.calibration.factor > 2.5
    assert summaries >= 1  # the raw counts alone never reach 0.8 of the window ...

    over, none, same = _run(chars_per_token=32)  # ... as this run shows
    assert over.status is RunStatus.COMPLETED, over.error
    assert same.calibration.samples >= 1 and same.calibration.factor == 1.0
    assert none == 0
