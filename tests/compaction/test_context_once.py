"""With automatic compaction on, a step's context is built once: the next call reuses the
view the post-step check measured, unless something it was built from changed between
(a compaction, corrections, an appended message, another routed model, another writer's
summary or constraints, another run, a calibration)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import pytest

from plait.adapters.stores.memory.store import MemoryStore
from plait.application.compaction import (
    CompactionService,
    ContextAssembler,
    ContextView,
    ModelProfile,
    ModelProfiles,
)
from plait.application.compaction.stage import CompactionStage
from plait.application.events import RunObserver
from plait.application.ports import ModelClient
from plait.application.service import AgentService
from plait.domain.compaction import CompactionSettings
from plait.domain.context import Correction
from plait.domain.messages import AssistantMessage, Message, UserMessage
from plait.domain.runs import RunStatus
from plait.domain.summary import Constraint
from plait.testing import CharMeter, FixedClock, SequentialIds, echo_tool
from tests.compaction.conftest import MODEL, Bench, coding_history, good_summary, run, scripted
from tests.compaction.test_loop import echo_turns, send, service, summaries
from tests.compaction.test_loop import scripted as scripted_run


class BuildSpy:
    """Wraps an assembler's ``build``: every view it returns, in order."""

    def __init__(self, assembler: ContextAssembler) -> None:
        self.views: list[ContextView] = []
        self._build = assembler.build

        async def build(*args: Any, **kw: Any) -> ContextView:
            view = await self._build(*args, **kw)
            self.views.append(view)
            return view

        assembler.build = build  # type: ignore[method-assign]

    @property
    def distinct(self) -> int:
        """How many views were built (a view returned again counts once)."""
        return len({id(v) for v in self.views})  # the list keeps them alive: ids are unique


@dataclass
class Usage:
    steps: int = 1
    model_calls: int = 1
    input_tokens: int = 0
    output_tokens: int = 0


@dataclass
class Ids:
    id: str


@dataclass
class RunIds:
    id: str
    model: str | None = None
    started_at: float = 0.0


@dataclass
class Active:
    """The stage's view of a run in progress (the driver's ``ActiveRun``)."""

    history: list[Message]
    run: RunIds = field(default_factory=lambda: RunIds("run_1"))
    session: Ids = field(default_factory=lambda: Ids("s1"))
    usage: Usage = field(default_factory=Usage)
    observer: RunObserver | None = None


async def rig(
    rounds: int = 4, *extra: ModelProfile, summaries: int = 1
) -> tuple[Bench, CompactionStage, BuildSpy, Active]:
    bench = Bench(scripted([good_summary()] * summaries), extra_profiles=extra)
    await bench.seed(coding_history(rounds))
    stage = CompactionStage(bench.service, instructions="Be brief.", tools=())
    spy = BuildSpy(bench.service.assembler)
    return bench, stage, spy, Active(await bench.messages())


async def fresh(stage: CompactionStage, a: Active, corrections: tuple[Correction, ...] = ()) -> Any:
    """The view a build without any kept view gives now."""
    return await stage.view(a.session.id, a.history, stage._routed(a), corrections)


def same(left: ContextView, right: ContextView) -> bool:
    lc, rc = left.context, right.context
    return (
        list(lc.items) == list(rc.items)
        and (lc.instructions, lc.tools, lc.corrections, lc.compacted, lc.output_type)
        == (rc.instructions, rc.tools, rc.corrections, rc.compacted, rc.output_type)
        and left.tokens == right.tokens
        and left.summary == right.summary
        and left.constraints == right.constraints
    )


# --- in a real run ---------------------------------------------------------------------------


def test_each_step_of_a_run_builds_its_context_once() -> None:
    """Window far above the threshold: the post-step check measures without compacting,
    and the next call gets that very view (on main: two builds per step)."""
    model = scripted_run(echo_turns(5), [])

    async def go() -> None:
        agent, _ = service(model, window=1_000_000)
        spy = BuildSpy(agent.driver.compaction.service.assembler)  # type: ignore[union-attr]
        sid, result = await send(agent)
        assert result.run.status is RunStatus.COMPLETED, result.run.error
        asked = [r for r in model.requests if r.role == "assistant"]
        # 5 post-step checks after the tool steps, and 1 after the final answer (measured
        # before it is saved; no call follows it, so it is the only view no call reuses)
        assert len(asked) == 6 and len(spy.views) == 6 + 6
        assert spy.distinct == len(asked) + 1
        by_context = {id(v.context): v for v in spy.views}
        for k, request in enumerate(asked):
            view = by_context[id(request.context)]
            assert view.history_messages == 1 + 2 * k  # the history the call was for
        # and each is what a build from scratch gives for that history
        history = [sm.message for sm in await agent.store.read_messages(sid)]
        stage = agent.driver.compaction
        assert isinstance(stage, CompactionStage)
        for request in asked:
            n = len(request.context.items)
            rebuilt = await stage.view(sid, history[:n], model.name)
            assert list(rebuilt.context.items) == list(request.context.items)

    run(go())


def test_a_run_that_compacts_builds_afresh_after_the_compaction() -> None:
    model = scripted_run(echo_turns(10), summaries(4))

    async def go() -> None:
        agent, store = service(model)
        spy = BuildSpy(agent.driver.compaction.service.assembler)  # type: ignore[union-attr]
        sid, result = await send(agent)
        assert result.run.status is RunStatus.COMPLETED, result.run.error
        asked = [r for r in model.requests if r.role == "assistant"]
        first = next(i for i, r in enumerate(asked) if r.context.compacted is not None)
        # the first call after a compaction sees the activated summary: not the view
        # measured before it (over the threshold, uncompacted)
        view = next(v for v in spy.views if v.context is asked[first].context)
        assert view.summary is not None and view.over_threshold is False
        summaries = await store.list_summaries(sid)
        assert view.summary in summaries

    run(go())


class _Died(BaseException):
    """The process running the run died (nothing below catches it)."""


def process(model: ModelClient, store: MemoryStore, tag: str) -> AgentService:
    """One process's service over the shared store (a window far from the threshold)."""
    ids = SequentialIds(prefix_tag=tag)
    profile = ModelProfile(model=model.name, meter=CharMeter(), context_window=1_000_000)
    compaction = CompactionService(
        store=store, profiles=ModelProfiles([profile]), summarizer=model, clock=FixedClock(),
        ids=ids, settings=CompactionSettings(summary_max_tokens=300),
    )  # fmt: skip
    agent = AgentService.build(
        store=store, artifacts=store, model=model, tools=[echo_tool().tool], clock=FixedClock(),
        ids=ids, compaction=compaction,
    )  # fmt: skip
    agent.owner = tag
    return agent


def test_a_recovered_run_builds_its_first_context_and_reuses_later_ones() -> None:
    turns = echo_turns(4)

    async def go() -> None:
        first = scripted_run(turns, [])
        store = MemoryStore()
        agent = process(first, store, "a")
        real = first.complete
        calls = 0

        async def complete(request: Any) -> Any:
            nonlocal calls
            calls += 1
            if calls == 3:
                raise _Died
            return await real(request)

        first.complete = complete  # type: ignore[method-assign]
        session = await agent.create_session()
        with pytest.raises(_Died):
            await agent.send(session.id, "Echo a lot, please.")
        stage = agent.driver.compaction
        assert isinstance(stage, CompactionStage)
        (dead,) = await store.list_runs()
        assert stage.state(dead.id).measured is None  # dropped when the drive ended

        second = scripted_run(turns, [])  # its position comes from the context
        again = process(second, store, "b")
        spy = BuildSpy(again.driver.compaction.service.assembler)  # type: ignore[union-attr]
        (report,) = await again.recover(run_id=dead.id, force=True)
        assert report.result is not None
        assert report.result.run.status is RunStatus.COMPLETED, report.result.run.error
        asked = [r for r in second.requests if r.role == "assistant"]
        assert len(asked) == 3 and spy.distinct == len(asked) + 1  # + the final answer's check
        assert spy.views[0].context is asked[0].context  # its first call: built, not kept
        history = [sm.message for sm in await store.read_messages(session.id)]
        assert [m.id for m in asked[0].context.items] == [m.id for m in history[:5]]

    run(go())


# --- the stage, between a post-step check and the next call -----------------------------------


def test_the_next_call_gets_the_measured_view_with_the_same_accounting() -> None:
    async def go() -> None:
        _, stage, spy, a = await rig()
        first = await stage.context_for(a, [])  # the run's first call: built
        assert spy.distinct == 1 and first is spy.views[0].context
        expected = stage.state("run_1").last_measured
        await stage.post_step(a)
        measured = stage.state("run_1").measured
        assert measured is not None and spy.distinct == 2
        context = await stage.context_for(a, [])
        assert context is measured.context and spy.distinct == 2  # not built again
        assert stage.state("run_1").measured is None  # taken by the call
        assert stage.state("run_1").last_measured == expected == measured.tokens.total
        assert same(measured, await fresh(stage, a))

    run(go())


def test_corrections_build_afresh() -> None:
    async def go() -> None:
        _, stage, spy, a = await rig()
        await stage.post_step(a)
        fix = (Correction(rejected_text="{oops", problems=("not JSON",)),)
        context = await stage.context_for(a, list(fix))
        assert spy.distinct == 2 and context.corrections == fix
        assert same(spy.views[-1], await fresh(stage, a, fix))
        assert stage.state("run_1").last_measured == spy.views[-1].tokens.total
        assert spy.views[-1].tokens.corrections > 0

    run(go())


def test_a_message_appended_between_builds_afresh() -> None:
    async def go() -> None:
        _, stage, spy, a = await rig()
        await stage.post_step(a)
        a.history.append(UserMessage(id="m_late", text="one more thing", created_at=9.0))
        context = await stage.context_for(a, [])
        assert spy.distinct == 2 and list(context.items)[-1].id == "m_late"

    run(go())


def test_another_routed_model_builds_afresh() -> None:
    async def go() -> None:
        other = ModelProfile(
            model="other", meter=CharMeter(chars_per_token=2), context_window=8_000
        )
        _, stage, spy, a = await rig(4, other)
        await stage.post_step(a)
        a.run.model = "other"
        await stage.context_for(a, [])
        assert spy.distinct == 2 and spy.views[-1].model == "other"
        assert spy.views[-1].tokens.total > spy.views[0].tokens.total  # its own meter

    run(go())


def test_constraints_added_by_another_writer_build_afresh() -> None:
    async def go() -> None:
        bench, stage, spy, a = await rig()
        await stage.post_step(a)
        rule = Constraint(text="never push to main", source_message_id="m1")
        await bench.store.add_constraints("s1", [rule])
        context = await stage.context_for(a, [])
        assert spy.distinct == 2 and spy.views[-1].constraints == (rule,)
        assert "never push to main" in context.items[0].text  # type: ignore[union-attr]

    run(go())


def test_a_summary_activated_by_another_writer_builds_afresh() -> None:
    async def go() -> None:
        bench, stage, spy, a = await rig()
        await stage.post_step(a)
        manual = await bench.service.compact("s1")  # e.g. `plait compact` meanwhile
        assert manual.status == "compacted"
        context = await stage.context_for(a, [])
        latest = spy.views[-1]
        assert context is latest.context and latest.summary == manual.summary
        assert context.compacted is not None
        assert same(latest, await fresh(stage, a))

    run(go())


def test_a_compacting_check_keeps_no_view() -> None:
    async def go() -> None:
        _, stage, spy, a = await rig(24)
        await stage.post_step(a)  # over the threshold: compacts
        assert stage.state("run_1").measured is None
        before = spy.distinct
        context = await stage.context_for(a, [])
        assert spy.distinct == before + 1 and context.compacted is not None

    run(go())


def test_a_check_at_the_compaction_cap_keeps_its_view() -> None:
    """Over the threshold but the run compacted its allowed times: nothing is compacted,
    so the next call gets the measured view."""

    async def go() -> None:
        bench, stage, spy, a = await rig(24)
        cap = bench.service.settings.max_compactions_per_run
        state = stage.state("run_1")
        state.compactions, state.counted = cap, True  # compacted that often in this process
        await stage.post_step(a)
        kept = stage.state("run_1").measured
        assert kept is not None and kept.over_threshold and kept.context.compacted is None
        assert await stage.context_for(a, []) is kept.context and spy.distinct == 1

    run(go())


def test_another_run_of_the_session_builds_its_own() -> None:
    async def go() -> None:
        _, stage, spy, a = await rig()
        await stage.post_step(a)
        kept = stage.state("run_1").measured
        b = Active(list(a.history), run=RunIds("run_2"))
        context = await stage.context_for(b, [])
        assert kept is not None and context is not kept.context and spy.distinct == 2
        assert stage.state("run_1").measured is kept  # the other run's view stays its own
        assert await stage.context_for(a, []) is kept.context

    run(go())


def test_a_calibration_between_builds_afresh() -> None:
    async def go() -> None:
        bench, stage, spy, a = await rig()
        await stage.post_step(a)
        bench.profiles.get(MODEL).calibration.observe(100, 150)  # another run of the model
        await stage.context_for(a, [])
        assert spy.distinct == 2 and spy.views[-1].calibration == 1.5

    run(go())


def test_release_and_forget_drop_the_kept_view() -> None:
    async def go() -> None:
        _, stage, spy, a = await rig()
        await stage.post_step(a)
        stage.release("run_1")
        assert stage.state("run_1").measured is None
        await stage.context_for(a, [])
        assert spy.distinct == 2
        await stage.post_step(a)
        stage.forget("run_1")
        await stage.context_for(a, [])
        assert spy.distinct == 4
        stage.release("never_seen")  # nothing kept: nothing to do

    run(go())


def test_auto_off_keeps_nothing() -> None:
    async def go() -> None:
        bench, stage, spy, a = await rig()
        bench.service.settings = replace(bench.service.settings, auto=False)
        await stage.post_step(a)
        assert stage.state("run_1").measured is None and spy.views == []
        await stage.context_for(a, [])
        assert spy.distinct == 1

    run(go())


def test_a_view_is_reused_only_for_its_own_basis() -> None:
    """The assembler's side: ``reuse`` is returned only for an equal basis."""

    async def go() -> None:
        bench, _, _, a = await rig()
        assembler = bench.service.assembler
        profile = bench.profiles.get(MODEL)

        async def build(history: list[Message], **kw: Any) -> ContextView:
            return await assembler.build(
                "s1", history, profile=profile, instructions="i", tools=(), **kw
            )

        view = await build(a.history)
        assert view.basis is not None and view.basis.history_length == len(a.history)
        assert await build(a.history, reuse=view) is view
        assert await build(list(a.history), reuse=view) is view  # same messages
        assert await build(a.history[:-1], reuse=view) is not view
        other = [*a.history[:-1], AssistantMessage(id="m_x", text="?", created_at=0.0)]
        assert await build(other, reuse=view) is not view
        assert (
            await assembler.build(
                "s1", a.history, profile=profile, instructions="j", tools=(), reuse=view
            )
            is not view
        )

    run(go())
