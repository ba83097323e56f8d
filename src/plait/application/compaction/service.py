"""CompactionService: when and what to compact, and activating the result
(docs/design.md#compaction).

Three triggers, one procedure:

- ``manual`` (``plait compact``): compact now if a complete unit beyond the active summary
  can be folded in.
- ``pressure`` (the RFC's post-step checkpoint): after a step's assistant output and all
  its tool results are persisted, measure the context the routed model would see next
  with that model's meter; compact when it reaches ``threshold × window``.
- ``overflow``: a ``CONTEXT_WINDOW_EXCEEDED`` from the model adapter. At most
  ``max_overflow_retries`` shrinking compactions (keeping only the newest unit); the
  caller retries only if the model-visible surface generation (the active summary's
  generation) increased, and otherwise reports the provider's error unchanged.

The procedure fixes the prefix when it starts (messages appended meanwhile stay in the
tail), summarizes raw messages only, validates the summary, and activates it with a
compare-and-set on the session's summary generation. A failed or invalid summary is not
activated; the previous one stays and the raw history is untouched.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from typing import Any

from plait.application.compaction._context import (
    CompactionStore,
    ContextAssembler,
    ContextView,
    summary_applies,
)
from plait.application.compaction._ledger import CountCache
from plait.application.compaction._outcome import (
    CompactionOutcome,
    RunCompaction,
)
from plait.application.compaction._outcome import outcome as _outcome
from plait.application.compaction._profiles import ModelProfile, ModelProfiles
from plait.application.compaction._render import TEMPLATE_VERSION, render_preamble
from plait.application.compaction._summarizer import (
    Summarizer,
    SummarizeResult,
    merge_bodies,
)
from plait.application.compaction.guard import CallGuard
from plait.application.ports import (
    Clock,
    IdGenerator,
    ModelClient,
)
from plait.domain.compaction import (
    CompactionPlan,
    CompactionSettings,
    Trigger,
    plan_compaction,
)
from plait.domain.errors import (
    CompactionError,
    ModelError,
    ModelErrorCode,
    SummaryConflictError,
    TokenMeterModelUnconfiguredError,
)
from plait.domain.facts import cap_facts, constraints_of, harvest_facts, merge_facts
from plait.domain.messages import AssistantMessage, Message
from plait.domain.session import StoredMessage
from plait.domain.summary import Summary, SummaryBody, source_digest, summary_problems
from plait.domain.tools import ToolSpec

__all__ = [
    "CompactionOutcome",
    "CompactionService",
    "CompactionStore",
    "RunCompaction",
]

log = logging.getLogger("plait.compaction")


class CompactionService:
    def __init__(
        self,
        *,
        store: CompactionStore,
        profiles: ModelProfiles,
        summarizer: ModelClient | None,
        clock: Clock,
        ids: IdGenerator,
        settings: CompactionSettings | None = None,
        cache: CountCache | None = None,
        summarizer_follows_run: bool = False,
    ) -> None:
        """``summarizer`` is the model of the summarizer role (``None``: summaries cannot
        be made by it, but contexts can still be built and measured).
        ``summarizer_follows_run``: it is only the process's own model (no model is
        configured for the role), so a run driven with another model (its recorded one,
        after a recovery or a resume) is summarized by that model, as it was in the
        process that started it. Without a summarizer, a run driven with a model of its
        own is summarized by it either way."""
        self.store = store
        self.profiles = profiles
        self.summarizer = summarizer
        self.summarizer_follows_run = summarizer_follows_run
        self.clock = clock
        self.ids = ids
        self.settings = settings or CompactionSettings()
        self.cache = cache or CountCache()
        self.assembler = ContextAssembler(store=store, settings=self.settings, cache=self.cache)

    # --- reading ----------------------------------------------------------------------------

    @staticmethod
    def routed_model(history: Sequence[Message]) -> str | None:
        """The model that produced the latest assistant message (the RFC's "latest actual
        routed model"), or ``None`` before any."""
        for message in reversed(history):
            if isinstance(message, AssistantMessage) and message.model:
                return message.model
        return None

    async def view(
        self,
        session_id: str,
        history: list[Message],
        *,
        model: str,
        instructions: str,
        tools: tuple[ToolSpec, ...],
        **kw: Any,
    ) -> ContextView:
        """The context the next call of ``model`` would get, with its token breakdown.
        Raises :class:`~plait.domain.errors.TokenMeterModelUnconfiguredError` for a model
        without a configured meter and window."""
        profile = self.profiles.get(model)
        return await self.assembler.build(
            session_id, history, profile=profile, instructions=instructions, tools=tools, **kw
        )

    # --- triggers ---------------------------------------------------------------------------

    async def after_step(
        self,
        session_id: str,
        history: list[Message],
        *,
        run: RunCompaction,
        instructions: str,
        tools: tuple[ToolSpec, ...],
        model: str | None = None,
        on_start: Callable[[], None] | None = None,
        before_compacting: Callable[[], Awaitable[None]] | None = None,
        run_model: ModelClient | None = None,
        guard: CallGuard | None = None,
    ) -> CompactionOutcome | None:
        """The post-step checkpoint. ``model`` is the model the step's request was routed
        to (the run's model, as recorded); default: the model named by the latest
        assistant message. ``before_compacting`` is awaited before a compaction, which
        reads the stored history (the run makes its results durable then). ``None`` when
        automatic compaction is off or no routed request exists yet. A routed model without
        a configured meter and window (unknown, or declaring none) raises
        :class:`~plait.domain.errors.TokenMeterModelUnconfiguredError`; a failed summary
        does not (the run goes on with the full history). ``guard``: the run's checks
        before each summarizer call. A view measured without compacting is left in
        ``run.measured`` for the next call to reuse. ``run_model``: the model the run is
        driven with (see ``summarizer_follows_run``)."""
        run.measured = None
        read, run.read = run.read, None
        if not self.settings.auto:
            return None
        model = model or self.routed_model(history)
        if model is None:
            return None
        view = await self.view(
            session_id, history, model=model, instructions=instructions, tools=tools, read=read
        )
        if not view.over_threshold:
            run.measured = view  # nothing compacted: the next call may reuse this context
            return None
        if await self.at_cap(session_id, run):
            run.measured = view
            return self._once(run, "cap", session_id, view, "pressure")
        if before_compacting is not None:
            await before_compacting()
        outcome = await self.compact(
            session_id,
            trigger="pressure",
            model=model,
            instructions=instructions,
            tools=tools,
            on_start=on_start,
            run_model=run_model,
            guard=guard,
        )
        if outcome.status == "compacted":
            run.compactions += 1
        if outcome.insufficient and "insufficient" not in run.warned:
            run.warned.add("insufficient")
            log.warning("session %s: %s", session_id, outcome.detail)
        return outcome

    async def on_overflow(
        self,
        session_id: str,
        error: ModelError,
        *,
        run: RunCompaction,
        model: str,
        instructions: str,
        tools: tuple[ToolSpec, ...],
        on_start: Callable[[], None] | None = None,
        run_model: ModelClient | None = None,
        guard: CallGuard | None = None,
    ) -> CompactionOutcome | None:
        """The overflow hook. Returns the outcome of a shrinking compaction, or ``None``
        when recovery does not apply (auto off, not an overflow, attempts used up). The
        caller retries, as a new step, only if ``outcome.surface_changed``; otherwise it
        reports ``error`` unchanged."""
        if not self.settings.auto or error.model_code != ModelErrorCode.CONTEXT_WINDOW_EXCEEDED:
            return None
        if run.overflow_attempts >= self.settings.max_overflow_retries:
            return None
        if await self.at_cap(session_id, run):
            return None
        run.overflow_attempts += 1
        outcome = await self.compact(
            session_id,
            trigger="overflow",
            model=model,
            instructions=instructions,
            tools=tools,
            on_start=on_start,
            run_model=run_model,
            guard=guard,
        )
        if outcome.status == "compacted":
            run.compactions += 1
        return outcome

    async def at_cap(self, session_id: str, run: RunCompaction) -> bool:
        """Whether the run made its allowed compactions. Counted, once per take-over of
        the run by this process (``run.counted``), from the stored summaries: a session
        has one active run at a time, so every automatic summary made since the run
        started (``run.since``) is that run's, whichever process made it; the cap holds
        across recoveries. Read only here, when a compaction is due."""
        if run.since is not None and not run.counted:
            summaries = await self.store.list_summaries(session_id)
            automatic = ("pressure", "overflow")
            stored = sum(
                1 for s in summaries if s.trigger in automatic and s.created_at > run.since
            )
            run.compactions = max(run.compactions, stored)
            run.counted = True
        return run.compactions >= self.settings.max_compactions_per_run

    def summarizer_for(self, run_model: ModelClient | None) -> ModelClient | None:
        """The summarizer of a run driven with ``run_model`` (see ``__init__``)."""
        if self.summarizer is not None and not self.summarizer_follows_run:
            return self.summarizer
        return run_model or self.summarizer

    @staticmethod
    def reset_overflow(run: RunCompaction) -> None:
        """A model request succeeded: consecutive overflow recoveries start over."""
        run.overflow_attempts = 0

    def _once(
        self, run: RunCompaction, what: str, session_id: str, view: ContextView, trigger: Trigger
    ) -> CompactionOutcome | None:
        if what in run.warned:
            return None
        run.warned.add(what)
        gen = 0 if view.summary is None else view.summary.generation
        detail = (
            f"the context is at {view.corrected_total} of {view.threshold_tokens} threshold "
            f"tokens, but this run already compacted {run.compactions} time(s), the cap; "
            "going on without compacting"
        )
        log.warning("session %s: %s", session_id, detail)
        return CompactionOutcome(
            status="skipped",
            detail=detail,
            trigger=trigger,
            generation_before=gen,
            generation_after=gen,
            measured_tokens=view.corrected_total,
            threshold_tokens=view.threshold_tokens,
        )

    # --- the procedure ----------------------------------------------------------------------

    async def compact(
        self,
        session_id: str,
        *,
        trigger: Trigger = "manual",
        model: str | None = None,
        instructions: str = "",
        tools: tuple[ToolSpec, ...] = (),
        on_start: Callable[[], None] | None = None,
        run_model: ModelClient | None = None,
        guard: CallGuard | None = None,
    ) -> CompactionOutcome:
        """Compact the session's history as it is now (see the module docstring).
        ``model`` is the model whose window and meter decide; default: the routed model of
        the history, else the summarizer's. ``on_start`` is called once the prefix is
        chosen, just before the summarizer is asked. ``run_model``: the model the run
        that asks is driven with (see ``__init__``). ``guard`` (a run's compaction): the
        run's cancellation and budget checks before each summarizer call."""
        summarizer = self.summarizer_for(run_model)
        stored = await self.store.read_messages(session_id)
        history = [sm.message for sm in stored]
        active = await self.store.get_summary(session_id)
        gen = 0 if active is None else active.generation
        name = model or self.routed_model(history) or (summarizer and summarizer.name)
        if not name:
            return _outcome("nothing_to_compact", "the session has no model turn yet", trigger, gen)
        profile = self.profiles.get(name)
        view = await self.assembler.build(
            session_id,
            history,
            profile=profile,
            instructions=instructions,
            tools=tools,
            summary=active,
        )
        usable = active if active is not None and summary_applies(active, history) else None
        plan = self._plan(session_id, profile, history, usable, trigger)
        if plan is None:
            return _outcome(
                "nothing_to_compact",
                "no complete unit beyond the active summary can be summarized (the newest "
                "unit and any unsettled calls always stay raw)",
                trigger,
                gen,
                view,
            )
        if summarizer is None:
            return _outcome("failed", "no summarizer model is configured", trigger, gen, view)
        if on_start is not None:
            on_start()
        return await self._summarize_and_activate(
            summarizer, session_id, stored, plan, usable, profile, view, trigger, gen, guard
        )

    async def _summarize_and_activate(
        self,
        model: ModelClient,
        session_id: str,
        stored: list[StoredMessage],
        plan: CompactionPlan,
        usable: Summary | None,
        profile: ModelProfile,
        view: ContextView,
        trigger: Trigger,
        gen: int,
        guard: CallGuard | None = None,
    ) -> CompactionOutcome:
        """Summarize ``plan``'s prefix, validate, activate by compare-and-set on ``gen``."""
        covered = plan.covered_through
        try:
            summary, result = await self._summarize(
                model, session_id, stored, covered, usable, profile, gen, guard
            )
        except CompactionError as exc:
            failed = _outcome("failed", exc.message, trigger, gen, view)
            return replace(failed, summarizer_calls=int(exc.details.get("calls", 0)))
        summary = replace(summary, source_tokens=plan.source_tokens, trigger=trigger)
        problems = summary_problems(summary, [sm.message.id for sm in stored[:covered]])
        if problems:
            detail = "summary not activated: " + "; ".join(problems)
            return _outcome("failed", detail, trigger, gen, view, result)
        activated = await self._activate(summary, gen)
        if isinstance(activated, str):
            return _outcome("superseded", activated, trigger, gen, view, result)
        history = [sm.message for sm in stored]
        return await self._compacted(activated, gen, trigger, view, history, result)

    def _plan(
        self,
        session_id: str,
        profile: ModelProfile,
        history: list[Message],
        usable: Summary | None,
        trigger: Trigger,
    ) -> CompactionPlan | None:
        ledger = self.assembler.ledger(session_id, profile.meter, history)
        return plan_compaction(
            prefix_tokens=ledger.prefix,
            cuts=ledger.cuts,
            already_covered=0 if usable is None else usable.covered_through_seq,
            retained_tokens=self.settings.retained_for(profile.context_window),
            trigger=trigger,
        )

    async def _summarize(
        self,
        model: ModelClient,
        session_id: str,
        stored: list[StoredMessage],
        covered: int,
        previous: Summary | None,
        profile: ModelProfile,
        gen: int,
        guard: CallGuard | None,
    ) -> tuple[Summary, SummarizeResult]:
        start = 0
        carried = SummaryBody(goal="")
        facts = harvest_facts(())
        ids = [sm.message.id for sm in stored[:covered]]
        if previous is not None and previous.source_digest == source_digest(
            ids[: previous.covered_through_seq]
        ):
            # The previous summary's items keep their raw source ids; only the raw
            # messages after it are read by the model.
            start, carried, facts = previous.covered_through_seq, previous.body, previous.facts
        try:
            own = self.profiles.get(model.name)
        except TokenMeterModelUnconfiguredError as exc:
            raise CompactionError(f"the summarizer cannot be budgeted: {exc.message}") from exc
        summarizer = Summarizer(
            model=model,
            profile=own,
            settings=self.settings,
            cache=self.cache,
        )
        result = await summarizer.summarize(stored[start:covered], guard)
        body = merge_bodies([carried, result.body]) if start else result.body
        new_range = [sm.message for sm in stored[start:covered]]
        facts = cap_facts(merge_facts(facts, harvest_facts(new_range)))
        await self.store.add_constraints(session_id, constraints_of(new_range))
        summary = Summary(
            id=self.ids.new("sum"),
            session_id=session_id,
            generation=gen + 1,
            covered_through_seq=covered,
            covered_through_message_id=ids[-1],
            source_digest=source_digest(ids),
            body=body,
            facts=facts,
            model=result.model,
            template_version=TEMPLATE_VERSION,
            created_at=self.clock.now(),
            meter=profile.meter.name,
        )
        tokens = profile.meter.count_text(render_preamble((), summary))
        return replace(summary, summary_tokens=tokens), result

    async def _activate(self, summary: Summary, gen: int) -> Summary | str:
        """Activate by compare-and-set; the activated summary, or why it was dropped."""
        for _ in range(2):
            try:
                await self.store.activate_summary(summary, expected_generation=gen)
                return summary
            except SummaryConflictError:
                current = await self.store.get_summary(summary.session_id)
                if current is None or current.covered_through_seq >= summary.covered_through_seq:
                    covered = 0 if current is None else current.covered_through_seq
                    return (
                        f"another compaction activated a summary through seq {covered} "
                        f"first; this one (through {summary.covered_through_seq}) was dropped"
                    )
                # A newer summary of a shorter prefix won the race: ours is independent
                # of it (made from raw history), so it may still replace it.
                gen = current.generation
                summary = replace(summary, generation=gen + 1)
        return "lost the activation race twice"

    async def _compacted(
        self,
        summary: Summary,
        gen: int,
        trigger: Trigger,
        view: ContextView,
        history: list[Message],
        result: SummarizeResult,
    ) -> CompactionOutcome:
        after = await self.assembler.build(
            summary.session_id,
            history,
            profile=self.profiles.get(view.model),
            instructions=view.context.instructions,
            tools=view.context.tools,
            summary=summary,
        )
        insufficient = after.over_threshold
        detail = (
            f"summarized messages 1..{summary.covered_through_seq} "
            f"({summary.source_tokens} tokens) into {summary.summary_tokens} tokens; "
            f"context {view.corrected_total} -> {after.corrected_total} tokens"
        )
        if insufficient:
            detail += (
                f"; still at or over the {view.threshold_tokens}-token threshold: the newest "
                "units are too large to compact further"
            )
        return CompactionOutcome(
            status="compacted",
            detail=detail,
            trigger=trigger,
            generation_before=gen,
            generation_after=summary.generation,
            summary=summary,
            measured_tokens=view.corrected_total,
            tokens_after=after.corrected_total,
            threshold_tokens=view.threshold_tokens,
            insufficient=insufficient,
            summarizer_calls=result.calls,
            summarizer_input_tokens=result.input_tokens,
            summarizer_output_tokens=result.output_tokens,
        )
