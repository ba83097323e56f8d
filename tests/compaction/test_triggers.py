"""The RFC's triggers: post-step pressure, overflow recovery, caps, auto off, unknown
models; and chunked / incremental summaries made from raw history only."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from plait.application.compaction import ModelProfile, RunCompaction
from plait.domain.compaction import CompactionSettings
from plait.domain.errors import ModelError, TokenMeterModelUnconfiguredError
from plait.domain.messages import (
    AssistantMessage,
    Message,
    ToolCall,
    ToolResult,
    ToolResultMessage,
    ToolStatus,
    UserMessage,
)
from plait.domain.units import units
from plait.testing import CharMeter
from tests.compaction.conftest import (
    MODEL,
    SETTINGS,
    Bench,
    coding_history,
    good_summary,
    run,
    scripted,
)

OVERFLOW = ModelError("prompt is too long", model_code="CONTEXT_WINDOW_EXCEEDED", status=400)


async def after_step(bench: Bench, state: RunCompaction | None = None) -> Any:
    return await bench.service.after_step(
        "s1", await bench.messages(), run=state or RunCompaction(), instructions="", tools=()
    )


async def overflow(bench: Bench, state: RunCompaction, error: ModelError = OVERFLOW) -> Any:
    return await bench.service.on_overflow(
        "s1", error, run=state, model=MODEL, instructions="", tools=()
    )


def test_pressure_is_measured_for_the_routed_model() -> None:
    async def go() -> None:
        big = ModelProfile(model="big", meter=CharMeter(), context_window=100_000)
        bench = Bench(scripted([good_summary()]), extra_profiles=(big,))
        history = [
            replace(m, model="big") if isinstance(m, AssistantMessage) else m
            for m in coding_history(24)
        ]
        await bench.seed(history)
        assert await after_step(bench) is None  # 100k window: far from the threshold

    run(go())


def test_unknown_routed_model_fails_with_its_name() -> None:
    async def go() -> None:
        bench = Bench(scripted([good_summary()]))
        history = [
            replace(m, model="mystery-7b") if isinstance(m, AssistantMessage) else m
            for m in coding_history(3)
        ]
        await bench.seed(history)
        with pytest.raises(TokenMeterModelUnconfiguredError, match="'mystery-7b'") as e:
            await after_step(bench)
        assert e.value.code == "token_meter_model_unconfigured"
        assert "TOKEN_METER_MODEL_UNCONFIGURED" in e.value.message

    run(go())


def test_no_routed_request_yet_means_no_work() -> None:
    async def go() -> None:
        bench = Bench(scripted([]))
        await bench.seed([UserMessage(id="m1", text="x" * 40_000, created_at=0)])
        assert await after_step(bench) is None

    run(go())


def test_overflow_compacts_keeping_only_the_newest_unit_and_proves_a_new_surface() -> None:
    async def go() -> None:
        bench = Bench(scripted([good_summary()]))
        await bench.seed(coding_history(4))  # far below the pressure threshold
        assert await after_step(bench) is None
        state = RunCompaction()
        outcome = await overflow(bench, state)
        assert outcome.status == "compacted" and outcome.surface_changed
        msgs = await bench.messages()
        newest = units(msgs)[-1]
        assert outcome.summary.covered_through_seq == newest.start
        assert state.overflow_attempts == 1

    run(go())


def test_overflow_with_nothing_to_compact_does_not_change_the_surface() -> None:
    async def go() -> None:
        model = scripted([good_summary()])
        bench = Bench(model)
        await bench.seed(coding_history(4))
        state = RunCompaction()
        first = await overflow(bench, state)
        assert first.surface_changed
        bench.service.reset_overflow(state)  # the retried request succeeded
        second = await overflow(bench, state)  # nothing new beyond the summary
        assert second.status == "nothing_to_compact" and not second.surface_changed
        assert len(model.requests) == 1

    run(go())


def test_overflow_attempts_are_capped_and_other_errors_do_not_apply() -> None:
    async def go() -> None:
        bench = Bench(scripted([good_summary(), good_summary()]))
        await bench.seed(coding_history(4))
        state = RunCompaction()
        assert (await overflow(bench, state)).surface_changed
        assert await overflow(bench, state) is None  # max_overflow_retries = 1
        limited = ModelError("slow down", model_code="RATE_LIMITED", status=429)
        assert await overflow(bench, RunCompaction(), limited) is None

    run(go())


def test_auto_off_registers_nothing_and_zero_overflow_retries_keeps_pressure() -> None:
    async def go() -> None:
        model = scripted([good_summary()])
        off = Bench(model, settings=replace(SETTINGS, auto=False))
        await off.seed(coding_history(24))
        assert await after_step(off) is None
        assert await overflow(off, RunCompaction()) is None
        assert model.requests == []
        manual = await off.service.compact("s1")  # on demand still works
        assert manual.status == "compacted"

        no_retry = Bench(
            scripted([good_summary()]), settings=replace(SETTINGS, max_overflow_retries=0)
        )
        await no_retry.seed(coding_history(24))
        assert await overflow(no_retry, RunCompaction()) is None
        assert (await after_step(no_retry)).status == "compacted"

    run(go())


def huge_unit_history() -> list[Message]:
    """Old small rounds, then one indivisible unit far over the threshold."""
    out = coding_history(3)
    n = len(out)
    out.append(
        AssistantMessage(
            id=f"m{n + 1}",
            text="",
            created_at=9.0,
            model=MODEL,
            tool_calls=(ToolCall.create(id="big", name="read_file", arguments={"path": "x"}),),
        )
    )
    out.append(
        ToolResultMessage(
            id=f"m{n + 2}",
            tool_name="read_file",
            created_at=9.0,
            result=ToolResult(call_id="big", status=ToolStatus.SUCCEEDED, content="y" * 16_000),
        )
    )
    return out


def test_no_compaction_loop_when_one_unit_is_too_large() -> None:
    async def go() -> None:
        model = scripted([good_summary(), good_summary()])
        bench = Bench(model)
        await bench.seed(huge_unit_history())
        state = RunCompaction()
        first = await after_step(bench, state)
        assert first.status == "compacted" and first.insufficient
        assert "too large" in first.detail
        second = await after_step(bench, state)
        assert second.status == "nothing_to_compact" and not second.surface_changed
        assert len(model.requests) == 1

    run(go())


def test_compactions_per_run_are_capped_and_said_once() -> None:
    async def go() -> None:
        bench = Bench(
            scripted([good_summary()]), settings=replace(SETTINGS, max_compactions_per_run=1)
        )
        await bench.seed(coding_history(24))
        state = RunCompaction()
        assert (await after_step(bench, state)).status == "compacted"
        await bench.append(coding_history(48)[len(await bench.messages()) :])
        capped = await after_step(bench, state)
        assert capped.status == "skipped" and "cap" in capped.detail
        assert await after_step(bench, state) is None

    run(go())


def test_a_history_larger_than_the_summarizer_window_is_summarized_in_raw_chunks() -> None:
    async def go() -> None:
        chunks = [good_summary(goal=f"goal {n}", cite=f"m{1 + 3 * (n - 1) * 4}") for n in (1, 2, 3)]
        model = scripted(chunks, window=2_500)
        bench = Bench(model, settings=replace(SETTINGS, summary_max_tokens=400))
        await bench.seed(coding_history(24))
        outcome = await bench.service.compact("s1")
        assert outcome.status == "compacted", outcome
        assert outcome.summary is not None
        n = len(model.requests)
        assert n >= 2 and outcome.summarizer_calls == n
        assert outcome.summary.goal == f"goal {n}"  # the latest chunk's goal
        seen: list[str] = []
        for request in model.requests:
            text = request.context.items[0].text  # type: ignore[union-attr]
            assert "Summary of messages" not in text  # raw messages only
            seen += [
                line.split('"')[1] for line in text.splitlines() if line.startswith("<message")
            ]
        k = outcome.summary.covered_through_seq
        msgs = await bench.messages()
        assert seen == [m.id for m in msgs[:k]]  # every message once, in order

    run(go())


def test_a_second_compaction_reads_only_new_raw_messages() -> None:
    async def go() -> None:
        model = scripted([good_summary(), good_summary(goal="goal two", cite="m80")])
        bench = Bench(model)
        await bench.seed(coding_history(24))
        first = await bench.service.compact("s1")
        await bench.append(coding_history(40)[len(await bench.messages()) :])
        second = await bench.service.compact("s1")
        assert first.summary is not None and second.summary is not None
        assert second.status == "compacted" and second.summary.generation == 2
        k1 = first.summary.covered_through_seq
        text = model.requests[1].context.items[0].text  # type: ignore[union-attr]
        assert f'id="m{k1}"' not in text and f'id="m{k1 + 1}"' in text
        assert "修复失败的测试" not in text.split("\n")[0]
        # the first summary's items are carried with their raw sources, not re-summarized
        assert second.summary.body.decisions[0].source_ids == ("m1",)
        assert second.summary.goal == "goal two"

    run(go())


def test_settings_are_validated_with_clear_errors() -> None:
    with pytest.raises(Exception, match="threshold"):
        CompactionSettings(threshold=2)


def test_a_configured_model_without_a_window_is_the_rfc_error_on_every_trigger() -> None:
    from plait.application.compaction import CompactionService, ModelProfiles
    from plait.application.ports import ModelCapabilities
    from plait.testing import FixedClock, FunctionModel, SequentialIds

    async def answer(request: Any) -> Any:
        raise AssertionError("no summarizer call expected")

    async def go() -> None:
        bench = Bench(scripted([]))
        model = FunctionModel(answer, name="local", capabilities=ModelCapabilities())
        bench.service = CompactionService(
            store=bench.store,
            profiles=ModelProfiles.of_clients([model], lambda c: CharMeter()),
            summarizer=model,
            clock=FixedClock(),
            ids=SequentialIds(),
            settings=SETTINGS,
        )
        history = [
            replace(m, model="local") if isinstance(m, AssistantMessage) else m
            for m in coding_history(24)
        ]
        await bench.seed(history)
        # the post-step check and a manual compaction: the same error, never a guess
        with pytest.raises(TokenMeterModelUnconfiguredError, match="declares no context window"):
            await after_step(bench)
        with pytest.raises(TokenMeterModelUnconfiguredError, match="declares no context window"):
            await bench.service.compact("s1", model="local")

    run(go())


def test_a_run_continuing_with_another_configured_model_is_measured_by_it() -> None:
    from dataclasses import dataclass, field

    from plait.application._run_state import UsageCounters
    from plait.application.compaction import CompactionService, ModelProfiles
    from plait.application.compaction.stage import CompactionStage
    from plait.application.model_caller import ModelCaller
    from plait.testing import FixedClock, SequentialIds

    service_model = scripted([], name="service-model")
    other = scripted([], window=100_000, name="other-model")

    @dataclass
    class View:
        history: list[Message]
        caller: ModelCaller
        usage: UsageCounters = field(default_factory=UsageCounters)
        observer: Any = None

        @property
        def session(self) -> Any:
            return type("S", (), {"id": "s1"})()

        @property
        def run(self) -> Any:
            return type("R", (), {"id": "r1", "model": "other-model", "started_at": 0.0})()

    async def go() -> None:
        bench = Bench(scripted([]))
        history = [
            replace(m, model="other-model") if isinstance(m, AssistantMessage) else m
            for m in coding_history(3)
        ]
        await bench.seed(history)
        service = CompactionService(
            store=bench.store,
            profiles=ModelProfiles.of_clients([service_model], lambda c: CharMeter()),
            summarizer=service_model,
            clock=FixedClock(),
            ids=SequentialIds(),
            settings=SETTINGS,
        )
        stage = CompactionStage(service, instructions="", tools=())
        view = View(history, ModelCaller(other, clock=FixedClock()))
        await stage.post_step(view)  # no token_meter_model_unconfigured: it knows the model
        assert service.profiles.get("other-model").context_window == 100_000
        with pytest.raises(TokenMeterModelUnconfiguredError, match="'mystery'"):
            service.profiles.get("mystery")  # still never guessed

    run(go())
