"""Resume without recounting: token counts are stored with the history (per meter
fingerprint) and read back by a fresh process, and nothing is counted for a model
without a window."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

import pytest

from plait.adapters.stores.memory.store import MemoryStore
from plait.adapters.stores.sqlite.store import SqliteStore
from plait.application.compaction import CompactionService, ModelProfile, ModelProfiles
from plait.application.compaction import stage as stage_module
from plait.application.compaction._context import (
    PRIME_AFTER,
    SAVE_EVERY,
    ContextAssembler,
    ContextView,
)
from plait.application.compaction._ledger import CountCache
from plait.application.compaction.stage import CompactionStage
from plait.application.ports import Commit
from plait.domain.compaction import CompactionSettings
from plait.domain.messages import AssistantMessage, Message, UserMessage
from plait.testing import CharMeter, FixedClock, SequentialIds
from tests.compaction.test_context_once import Active, RunIds
from tests.contract.builders import new_session

N = 200


def run(coro: Coroutine[Any, Any, Any]) -> Any:
    return asyncio.run(coro)


def messages(n: int = N) -> list[Message]:
    out: list[Message] = []
    for i in range(n):
        if i % 2 == 0:
            out.append(UserMessage(id=f"m{i}", text=f"question {i} " * (i % 7 + 1), created_at=i))
        else:
            out.append(AssistantMessage(id=f"m{i}", text="answer " * (i % 5 + 1), created_at=i))
    return out


async def seeded(path: Path, history: list[Message]) -> SqliteStore:
    store = SqliteStore.open(path)
    await store.create_session(new_session("s1"))
    await store.commit(Commit(session_id="s1", expected_version=0, messages=tuple(history)))
    return store


async def view(store: Any, meter: CharMeter, history: list[Message]) -> ContextView:
    """A build as a fresh process makes it (its own cache, no ledger yet)."""
    assembler = ContextAssembler(store=store, settings=CompactionSettings(), cache=CountCache())
    profile = ModelProfile(model="m", meter=meter, context_window=1_000_000)
    return await assembler.build("s1", history, profile=profile, instructions="hi", tools=())


def test_a_fresh_process_reads_the_counts_instead_of_measuring_again(tmp_path: Path) -> None:
    history = messages()

    async def go() -> None:
        store = await seeded(tmp_path / "p.db", history)
        try:
            first_meter = CharMeter()
            first = await view(store, first_meter, history)
            assert first_meter.counted == N  # nothing stored yet: measured once
            again = CharMeter()
            second = await view(store, again, history)
            assert again.counted == 0  # read back, not measured
            assert second.tokens == first.tokens
            assert second.full_history_tokens == first.full_history_tokens
            # a few new messages are measured, only they
            more = [*history, UserMessage(id="new", text="one more", created_at=999.0)]
            await store.commit(Commit(session_id="s1", expected_version=N, messages=(more[-1],)))
            third = CharMeter()
            await view(store, third, more)
            assert third.counted == 1
        finally:
            await store.close()

    run(go())


def test_a_stored_count_equals_a_fresh_count(tmp_path: Path) -> None:
    history = messages()

    async def go() -> None:
        store = await seeded(tmp_path / "p.db", history)
        try:
            meter = CharMeter()
            await view(store, meter, history)
            stored = await store.read_token_counts("s1", meter.fingerprint)
            assert stored == {m.id: CharMeter().count_message(m) for m in history}
        finally:
            await store.close()

    run(go())


def test_counts_of_another_meter_are_not_reused(tmp_path: Path) -> None:
    history = messages()

    async def go() -> None:
        store = await seeded(tmp_path / "p.db", history)
        try:
            await view(store, CharMeter(), history)
            # same name, other counting: another fingerprint
            other = CharMeter(chars_per_token=3, name="chars/4")
            assert other.fingerprint != CharMeter().fingerprint
            fresh = await view(store, other, history)
            assert other.counted == N
            assert fresh.full_history_tokens == sum(
                CharMeter(chars_per_token=3).count_message(m) for m in history
            )
        finally:
            await store.close()

    run(go())


def test_a_meter_without_a_fingerprint_is_not_stored(tmp_path: Path) -> None:
    class Anonymous(CharMeter):
        fingerprint = ""

    history = messages()

    async def go() -> None:
        store = await seeded(tmp_path / "p.db", history)
        try:
            await view(store, Anonymous(), history)
            assert await store.read_token_counts("s1", CharMeter().fingerprint) == {}
            again = Anonymous()
            await view(store, again, history)
            assert again.counted == N
        finally:
            await store.close()

    run(go())


def test_calibration_applies_to_stored_counts_as_to_fresh_ones(tmp_path: Path) -> None:
    history = messages()

    async def go() -> None:
        store = await seeded(tmp_path / "p.db", history)
        try:
            profile = ModelProfile(model="m", meter=CharMeter(), context_window=1_000_000)
            for _ in range(5):
                profile.calibration.observe(1000, 1300)
            assert profile.calibration.factor > 1.0
            totals = []
            for _ in range(2):
                assembler = ContextAssembler(
                    store=store, settings=CompactionSettings(), cache=CountCache()
                )
                fresh_profile = ModelProfile(
                    model="m", meter=CharMeter(), context_window=1_000_000,
                    calibration=profile.calibration,
                )  # fmt: skip
                built = await assembler.build(
                    "s1", history, profile=fresh_profile, instructions="hi", tools=()
                )
                totals.append((built.calibration, built.corrected_total))
            assert totals[0] == totals[1]
            assert totals[0][1] > sum(CharMeter().count_message(m) for m in history)
        finally:
            await store.close()

    run(go())


def test_a_store_without_counts_is_measured_as_before() -> None:
    history = messages()

    async def go() -> None:
        store = MemoryStore()
        await store.create_session(new_session("s1"))
        await store.commit(Commit(session_id="s1", expected_version=0, messages=tuple(history)))
        first, second = CharMeter(), CharMeter()
        a = await view(store, first, history)
        b = await view(store, second, history)
        assert first.counted == second.counted == N
        assert a.tokens == b.tokens

    run(go())


def test_only_batches_are_written(tmp_path: Path) -> None:
    """A step adds a message or two: their counts wait until SAVE_EVERY are due."""
    history = messages(PRIME_AFTER)

    async def go() -> None:
        store = await seeded(tmp_path / "p.db", history)
        try:
            assembler = ContextAssembler(
                store=store, settings=CompactionSettings(), cache=CountCache()
            )
            profile = ModelProfile(model="m", meter=CharMeter(), context_window=1_000_000)
            await assembler.build("s1", history, profile=profile, instructions="", tools=())
            assert len(await store.read_token_counts("s1", CharMeter().fingerprint)) == len(history)
            grown = list(history)
            for k in range(SAVE_EVERY - 1):
                message = UserMessage(id=f"n{k}", text="more", created_at=1e4 + k)
                await store.commit(
                    Commit(session_id="s1", expected_version=len(grown), messages=(message,))
                )
                grown.append(message)
                await assembler.build("s1", grown, profile=profile, instructions="", tools=())
            stored = await store.read_token_counts("s1", CharMeter().fingerprint)
            assert len(stored) == len(history)  # SAVE_EVERY - 1 waiting
            last = UserMessage(id="last", text="more", created_at=2e4)
            await store.commit(
                Commit(session_id="s1", expected_version=len(grown), messages=(last,))
            )
            grown.append(last)
            await assembler.build("s1", grown, profile=profile, instructions="", tools=())
            stored = await store.read_token_counts("s1", CharMeter().fingerprint)
            assert len(stored) == len(grown)
        finally:
            await store.close()

    run(go())


def test_nothing_is_counted_for_a_model_without_a_window(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Automatic compaction off and a model declaring no window: the step's context is
    the history, and no message is measured (there is no window to check against)."""
    meter = CharMeter()
    monkeypatch.setattr(stage_module, "_FALLBACK", meter)
    history = messages()

    async def go() -> None:
        store = MemoryStore()
        await store.create_session(new_session("s1"))
        await store.commit(Commit(session_id="s1", expected_version=0, messages=tuple(history)))
        service = CompactionService(
            store=store, profiles=ModelProfiles(without_window=["m"]), summarizer=None,
            clock=FixedClock(), ids=SequentialIds(), settings=CompactionSettings(auto=False),
        )  # fmt: skip
        stage = CompactionStage(service, instructions="hi", tools=())
        context = await stage.context_for(Active(history, run=RunIds("r1", model="m")), ())
        assert list(context.items) == history
        assert meter.counted == 0
        # a model with a window is still measured (the context is never sent over it)
        profiles = ModelProfiles([ModelProfile(model="w", meter=meter, context_window=10**9)])
        service = CompactionService(
            store=store, profiles=profiles, summarizer=None, clock=FixedClock(),
            ids=SequentialIds(), settings=CompactionSettings(auto=False),
        )  # fmt: skip
        stage = CompactionStage(service, instructions="hi", tools=())
        await stage.context_for(Active(history, run=RunIds("r2", model="w")), ())
        assert meter.counted == N

    run(go())


def test_a_tokenizer_stores_exactly_its_counts_and_estimates_store_none(tmp_path: Path) -> None:
    from plait.adapters.tokens import EstimatingMeter, OpenAIMeter
    from plait.application.compaction._context import meter_fingerprint
    from plait.application.compaction.estimate import EstimateMeter

    assert meter_fingerprint(EstimateMeter()) is None  # counting is cheaper than a read
    assert meter_fingerprint(EstimatingMeter("m")) is None
    o200k, cl100k = OpenAIMeter("o200k_base"), OpenAIMeter("cl100k_base")
    assert meter_fingerprint(o200k) != meter_fingerprint(cl100k)
    history = messages(PRIME_AFTER)

    async def go() -> None:
        store = await seeded(tmp_path / "p.db", history)
        try:
            assembler = ContextAssembler(
                store=store, settings=CompactionSettings(), cache=CountCache()
            )
            profile = ModelProfile(model="m", meter=o200k, context_window=1_000_000)
            await assembler.build("s1", history, profile=profile, instructions="", tools=())
            stored = await store.read_token_counts("s1", o200k.fingerprint)
            assert stored == {m.id: OpenAIMeter("o200k_base").count_message(m) for m in history}
            assert await store.read_token_counts("s1", cl100k.fingerprint) == {}
        finally:
            await store.close()

    run(go())
