"""The seams between the run driver and compaction (the RFC's triggers in a run).

:class:`CompactionStage` gives the driver three things, each bound to the run it drives:

- :meth:`context_for`: the assistant's context with the constraint records, the active
  summary and the raw tail;
- :meth:`post_step`: the post-step checkpoint, called once the step's tool results are
  in the run's history; its ``durable`` makes them durable, and is awaited before a
  compaction reads the stored history (so without one the last result may still ride
  with the next step's commit);
- :meth:`recover`: called after a step failed. For the provider's
  ``CONTEXT_WINDOW_EXCEEDED`` it tries one shrinking compaction and says "retry" only if
  the model-visible surface generation increased; the driver then closes the failed
  step and retries as a new step, rebuilding the context from the stored history.
  Otherwise the provider's error ends the run unchanged.

The post-step check builds the context the next call would get to measure it; when it
does not compact, the run keeps that view and the next :meth:`context_for` returns it,
instead of building it a second time, if nothing it was built from changed (see
:class:`~plait.application.compaction._context.ViewBasis`). :meth:`release` drops it when
the run is no longer driven.

Each compaction is reported to the run's observer as :class:`~plait.application.events.
CompactionEvent` (started, then activated / failed / skipped). Summarizer calls come
out of the run's budget: the driver's :class:`~plait.application.compaction.guard.
CallGuard` checks each before it is made, counts it, and lets a cancel interrupt it.
``auto=False`` makes the stage register nothing automatic: no pressure check, no overflow
recovery (the context of a call is still never sent over the window).

The post-step check also follows a final answer (:meth:`due_after_answer` measures it
before it is saved; only when it is due does the driver save the answer, run the check,
then end the run). :meth:`context_for` never returns a context measured over the window
(:meth:`_fit`). :meth:`check_model` / :meth:`check_run` apply the one rule for a model
without a window: with ``auto`` on it is ``TOKEN_METER_MODEL_UNCONFIGURED``.
"""

from __future__ import annotations

import logging
import math
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Literal, Protocol

from plait.application._run_state import StopRun
from plait.application.compaction._context import ContextView
from plait.application.compaction._profiles import ModelProfile
from plait.application.compaction.estimate import EstimateMeter
from plait.application.compaction.guard import CallGuard
from plait.application.compaction.service import (
    CompactionOutcome,
    CompactionService,
    RunCompaction,
)
from plait.application.events import CompactionEvent, RunObserver
from plait.application.ports import ModelClient
from plait.domain.context import Context, Correction, Prefix
from plait.domain.errors import (
    ContextBudgetInsufficientError,
    ModelError,
    ModelErrorCode,
    TokenMeterModelUnconfiguredError,
)
from plait.domain.messages import AssistantMessage, Message
from plait.domain.runs import RunStatus
from plait.domain.tools import ToolSpec

__all__ = ["CompactionStage", "NoCompaction", "RunView"]

log = logging.getLogger("plait.compaction")

_FALLBACK = EstimateMeter("estimate (model unconfigured)")

Durable = Callable[[], Awaitable[None]]
"""Makes the run's saved results durable (the journal's ``durable`` for the run)."""

_PHASES: dict[str, Literal["activated", "failed", "skipped"]] = {
    "compacted": "activated",
    "failed": "failed",
    "superseded": "skipped",
    "skipped": "skipped",
    "nothing_to_compact": "skipped",
}


class _Usage(Protocol):
    steps: int
    model_calls: int
    input_tokens: int
    output_tokens: int


class _Ids(Protocol):
    @property
    def id(self) -> str: ...


class _Run(Protocol):
    @property
    def id(self) -> str: ...
    @property
    def model(self) -> str | None: ...
    @property
    def started_at(self) -> float: ...


class RunView(Protocol):
    """What the stage reads of the driver's in-progress run (``ActiveRun``)."""

    @property
    def history(self) -> list[Message]: ...
    @property
    def usage(self) -> _Usage: ...
    @property
    def session(self) -> _Ids: ...
    @property
    def run(self) -> _Run: ...
    @property
    def observer(self) -> RunObserver | None: ...


class _Builder(Protocol):
    def assistant(
        self, history: list[Message], corrections: Sequence[Correction] = ()
    ) -> Context[AssistantMessage]: ...


class NoCompaction:
    """The driver's stage when compaction is off: the ContextBuilder's plain context, no
    overflow hook, no post-step work."""

    def __init__(self, builder: _Builder) -> None:
        self.builder = builder

    async def context_for(
        self, active: RunView, corrections: Sequence[Correction], guard: CallGuard | None = None
    ) -> Context[AssistantMessage]:
        return self.builder.assistant(active.history, corrections)

    async def post_step(
        self, active: RunView, durable: Durable | None = None, guard: CallGuard | None = None
    ) -> None:
        return None

    async def due_after_answer(self, active: RunView, answer: Message) -> bool:
        return False

    def check_model(self, model: str) -> None:
        return None

    def use_tools(self, tools: tuple[ToolSpec, ...]) -> None:
        return None  # the builder's tools are the driver's

    def check_run(self, active: RunView) -> None:
        return None

    def release(self, run_id: str) -> None:
        return None

    async def recover(
        self, active: RunView, stop: StopRun, step: int, guard: CallGuard | None = None
    ) -> bool:
        return False


class CompactionStage:
    def __init__(
        self,
        service: CompactionService,
        *,
        instructions: str,
        tools: tuple[ToolSpec, ...],
        emit: Callable[[Any, CompactionEvent], None] | None = None,
        max_runs_tracked: int = 1_024,
    ) -> None:
        self.service = service
        self._deliver = emit
        """The run's event path (the journal's: events stay in order behind a commit in
        flight); without one, straight to the run's observer."""
        self.instructions = instructions
        self.tools = tools
        self._runs: OrderedDict[str, RunCompaction] = OrderedDict()
        self._max = max_runs_tracked

    @property
    def auto(self) -> bool:
        return self.service.settings.auto

    def use_tools(self, tools: tuple[ToolSpec, ...]) -> None:
        """Offer ``tools`` from the next context on (the tool set changed)."""
        self.tools = tools

    def state(self, run_id: str) -> RunCompaction:
        state = self._runs.get(run_id)
        if state is None:
            state = self._runs[run_id] = RunCompaction()
            if len(self._runs) > self._max:
                self._runs.popitem(last=False)
        return state

    def forget(self, run_id: str) -> None:
        self._runs.pop(run_id, None)

    def release(self, run_id: str) -> None:
        """The run is no longer driven here: drop the view kept for its next call (its
        counters stay, for a run driven again later; its count of compactions is read
        again from the store then, as another process may have driven it meanwhile)."""
        state = self._runs.get(run_id)
        if state is not None:
            state.measured = None
            state.counted = False

    def _run_state(self, active: RunView) -> RunCompaction:
        """The run's counters; until counted since this process (again) drives the run,
        its compactions are counted from the stored summaries when the cap matters (the
        per-run cap holds across recoveries)."""
        state = self.state(active.run.id)
        state.since = active.run.started_at
        return state

    def _profile(self, model: str) -> ModelProfile:
        """The model's profile; for building (not for deciding) an unconfigured model
        gets a conservative estimate so an existing summary is still used."""
        try:
            return self.service.profiles.get(model)
        except TokenMeterModelUnconfiguredError:
            return ModelProfile(model=model, meter=_FALLBACK, context_window=1 << 40)

    async def view(
        self,
        session_id: str,
        history: list[Message],
        model: str,
        corrections: Sequence[Correction] = (),
        reuse: ContextView | None = None,
        measure: bool = True,
    ) -> ContextView:
        """``reuse``: a view built before, returned if nothing it was built from changed.
        ``measure=False``: nothing is counted (see ``ContextAssembler.build``)."""
        return await self.service.assembler.build(
            session_id,
            history,
            profile=self._profile(model),
            instructions=self.instructions,
            tools=self.tools,
            output_type=AssistantMessage,
            corrections=tuple(corrections),
            reuse=reuse,
            measure=measure,
        )

    def _has_window(self, model: str) -> bool:
        try:
            self.service.profiles.get(model)
        except TokenMeterModelUnconfiguredError:
            return False
        return True

    def _charge(
        self, run: RunView, outcome: CompactionOutcome | None, guard: CallGuard | None
    ) -> None:
        """Log a failed or skipped outcome; without a guard (which charged each call before
        it was made), charge its summarizer calls to the run afterwards."""
        if outcome is None:
            return
        if guard is None:
            run.usage.model_calls += outcome.summarizer_calls
            run.usage.input_tokens += outcome.summarizer_input_tokens
            run.usage.output_tokens += outcome.summarizer_output_tokens
        if outcome.status in ("failed", "skipped"):
            log.warning("compaction (%s) %s: %s", outcome.trigger, outcome.status, outcome.detail)

    # --- the driver's side ------------------------------------------------------------------

    def _routed(self, active: RunView) -> str:
        caller = getattr(active, "caller", None)  # a run continuing with its own recorded model
        if caller is not None and caller.has_model:
            self.service.profiles.learn(caller.model)
        return active.run.model or self.service.routed_model(active.history) or ""

    @staticmethod
    def _run_model(active: RunView) -> ModelClient | None:
        """The model the run is driven with (the summarizer, unless one is configured)."""
        caller = getattr(active, "caller", None)
        return caller.model if caller is not None and caller.has_model else None

    def check_model(self, model: str) -> None:
        """With automatic compaction on, a model without a configured meter and window
        raises :class:`~plait.domain.errors.TokenMeterModelUnconfiguredError` (a run of it
        could not be measured); with it off, nothing automatic measures."""
        if self.auto:
            self.service.profiles.get(model)

    def check_run(self, active: RunView) -> None:
        """:meth:`check_model` for the run's routed model, as the run's stop (``failed``,
        ``token_meter_model_unconfigured``): checked before a run taken over (recovery, a
        worker, resume) makes any model call."""
        model = self._routed(active)
        if not model:
            return
        try:
            self.check_model(model)
        except TokenMeterModelUnconfiguredError as exc:
            raise StopRun(RunStatus.FAILED, exc.code, exc.message) from exc

    async def context_for(
        self, active: RunView, corrections: Sequence[Correction], guard: CallGuard | None = None
    ) -> Context[AssistantMessage]:
        """The context of the run's next call: the one its post-step check measured, when
        nothing it was built from changed since (else built afresh). A context measured
        over the model's window is never returned (see :meth:`_fit`). For a model without
        a window (no profile), nothing is counted: there is no window to check against."""
        state = self.state(active.run.id)
        measured, state.measured = state.measured, None
        state.read = None
        model = self._routed(active)
        view = await self.view(
            active.session.id, active.history, model, corrections, measured, self._has_window(model)
        )
        if view.corrected_total > view.budget.window:
            context, tokens = await self._fit(active, view, model, corrections, guard)
        else:
            context, tokens = view.context, view.tokens.total
            state.read = view.basis
        state.last_measured = tokens
        return context

    async def _fit(
        self,
        active: RunView,
        view: ContextView,
        model: str,
        corrections: Sequence[Correction],
        guard: CallGuard | None,
    ) -> tuple[Context[AssistantMessage], int]:
        """The article §八: a request measured over the window is never sent. With
        automatic compaction on, one shrinking compaction (keeping only the newest unit)
        is tried first; if the compacted context still does not fit, the raw history is
        used if it fits; else the run ends ``failed`` with ``context_budget_insufficient``."""
        window, state, step = view.budget.window, self.state(active.run.id), active.usage.steps + 1
        tried = view.corrected_total
        if self.auto and state.compactions < self.service.settings.max_compactions_per_run:
            outcome = await self._compact_now(active, model, step, guard)
            if outcome is not None and outcome.status == "compacted":
                state.compactions += 1
                view = await self.view(active.session.id, active.history, model, corrections)
                tried = view.corrected_total
                if tried <= window:
                    return view.context, view.tokens.total
        tokens = view.tokens
        raw = tokens.instructions + tokens.tools + tokens.corrections + view.full_history_tokens
        raw_corrected = raw if view.calibration == 1.0 else math.ceil(raw * view.calibration)
        if raw_corrected <= window:
            context: Context[AssistantMessage] = Context(
                instructions=self.instructions,
                tools=self.tools,
                items=Prefix(active.history),
                output_type=AssistantMessage,
                corrections=tuple(corrections),
            )
            return context, raw
        error = ContextBudgetInsufficientError(
            f"the next request to model {model!r} measures {tried} tokens, over its "
            f"{window}-token context window, even after compaction (the raw history alone: "
            f"{raw_corrected}); it was not sent. The newest units are too large to compact: "
            "continue in a new session (or a fork from an earlier point), or use a model "
            "with a larger window",
            model=model,
            tokens=tried,
            window=window,
        )
        raise StopRun(RunStatus.FAILED, error.code, error.message) from error

    async def _compact_now(
        self, active: RunView, model: str, step: int, guard: CallGuard | None
    ) -> CompactionOutcome | None:
        """A shrinking compaction before a call whose context does not fit; its failure
        is reported and leaves the context as it was (the run's stop propagates)."""
        try:
            outcome = await self.service.compact(
                active.session.id,
                trigger="overflow",
                model=model,
                instructions=self.instructions,
                tools=self.tools,
                on_start=self._announce(active, "overflow", step),
                guard=guard,
                run_model=self._run_model(active),
            )
        except StopRun:
            raise
        except Exception as exc:
            log.exception("compaction of run %s before a call raised", active.run.id)
            self._failed(active, "overflow", step, exc)
            return None
        self._charge(active, outcome, guard)
        self._report(active, outcome, step)
        return outcome

    async def due_after_answer(self, active: RunView, answer: Message) -> bool:
        """Whether the post-step check after a final answer (no calls) has work: the
        context with ``answer`` reaches the threshold, or the routed model cannot be
        measured (the check then fails the turn). Measured once, before the answer is
        saved, so a run whose answer does not need a compaction still ends in one commit."""
        if not self.auto:
            return False
        model = self._routed(active)
        if not model:
            return False
        try:
            profile = self.service.profiles.get(model)
        except TokenMeterModelUnconfiguredError:
            return True
        state = self._runs.get(active.run.id)
        read = None if state is None else state.read
        if state is not None:
            state.read = None
        view = await self.service.assembler.build(
            active.session.id,
            [*active.history, answer],
            profile=profile,
            instructions=self.instructions,
            tools=self.tools,
            read=read,
        )
        return view.over_threshold

    def _calibrate(self, active: RunView) -> None:
        """Teach the routed model's calibration what the provider reported for the step's
        request against what its meter counted."""
        state = self._runs.get(active.run.id)
        last = next((m for m in reversed(active.history) if isinstance(m, AssistantMessage)), None)
        if state is None or not state.last_measured or last is None or last.usage is None:
            return
        try:
            profile = self.service.profiles.get(self._routed(active))
        except TokenMeterModelUnconfiguredError:
            return
        profile.calibration.observe(state.last_measured, last.usage.input_tokens)
        state.last_measured = 0

    async def post_step(
        self, active: RunView, durable: Durable | None = None, guard: CallGuard | None = None
    ) -> None:
        """After the step's assistant message and all its results (``durable`` makes
        them durable; awaited before compacting). An unknown routed model ends the run
        (``token_meter_model_unconfigured``); the run's stop raised by ``guard`` (a
        cancel) propagates, except a spent budget: the compaction is then skipped (an
        event says why) and the run goes on to end at its next budget check; any other
        failure of the compaction is reported (a ``failed`` event) and the run goes on
        with the full history."""
        self.succeeded(active.run.id)
        self._calibrate(active)
        if not self.auto:
            return
        step = active.usage.steps
        try:
            outcome = await self.service.after_step(
                active.session.id,
                active.history,
                run=self._run_state(active),
                instructions=self.instructions,
                tools=self.tools,
                model=self._routed(active),
                on_start=self._announce(active, "pressure", step),
                before_compacting=durable,
                run_model=self._run_model(active),
                guard=guard,
            )
        except TokenMeterModelUnconfiguredError as exc:
            raise StopRun(RunStatus.FAILED, exc.code, exc.message) from exc
        except StopRun as stop:
            if stop.status is not RunStatus.BUDGET_EXHAUSTED:
                raise
            self._emit(
                active,
                CompactionEvent(
                    run_id=active.run.id,
                    phase="skipped",
                    trigger="pressure",
                    step=step,
                    detail=f"not compacted: {stop.error.message}",
                ),
            )
            return
        except Exception as exc:  # operational: say so and go on with the full history
            log.exception("post-step compaction of run %s raised; going on", active.run.id)
            self._failed(active, "pressure", step, exc)
            return
        self._charge(active, outcome, guard)
        if outcome is not None:
            self._report(active, outcome, step)

    async def recover(
        self, active: RunView, stop: StopRun, step: int, guard: CallGuard | None = None
    ) -> bool:
        """The RFC's overflow recovery, between the failed step and the next one. ``stop``
        ended step ``step``; if its cause is the provider's ``CONTEXT_WINDOW_EXCEEDED``,
        try at most ``max_overflow_retries`` consecutive shrinking compactions keeping the
        newest unit. True only when the session's summary generation (the model-visible
        surface) increased: step ``step`` is then closed (counted in the run's steps) and
        the driver retries as a new step. False in every other
        case (auto off, another error, attempts used up, unknown routed model, nothing to
        compact, the run's budget spent, the compaction failed or raised): the original
        error stands unchanged. A cancel (``guard``) propagates as the run's stop."""
        error = stop.__cause__
        if not self.auto or not isinstance(error, ModelError):
            return False
        if error.model_code != ModelErrorCode.CONTEXT_WINDOW_EXCEEDED:
            return False
        sid = active.session.id
        try:
            before = await self._generation(sid)
            outcome = await self.service.on_overflow(
                sid,
                error,
                run=self._run_state(active),
                model=self._routed(active),
                instructions=self.instructions,
                tools=self.tools,
                on_start=self._announce(active, "overflow", step),
                run_model=self._run_model(active),
                guard=guard,
            )
            after = await self._generation(sid)
        except TokenMeterModelUnconfiguredError:
            return False  # no window to shrink to: the provider's error stands
        except StopRun as own:
            if own.status is RunStatus.BUDGET_EXHAUSTED:
                return False
            raise
        except Exception as exc:
            log.exception("overflow recovery of run %s raised; the error stands", active.run.id)
            self._failed(active, "overflow", step, exc)
            return False
        self._charge(active, outcome, guard)
        if outcome is None:
            return False
        self._report(active, outcome, step)
        if after <= before:
            return False
        active.usage.steps = step  # the failed step is closed: the retry is the next one
        return True

    async def _generation(self, session_id: str) -> int:
        active = await self.service.store.get_summary(session_id)
        return 0 if active is None else active.generation

    # --- events -----------------------------------------------------------------------------

    def _failed(self, active: RunView, trigger: str, step: int, exc: Exception) -> None:
        """Tell the run's observer that a compaction raised (the run goes on or stops as
        its caller decides)."""
        event = CompactionEvent(
            run_id=active.run.id,
            phase="failed",
            trigger=trigger,
            step=step,
            detail=f"{type(exc).__name__}: {exc}",
        )
        self._emit(active, event)

    def _emit(self, active: RunView, event: CompactionEvent) -> None:
        if self._deliver is not None:
            self._deliver(active, event)
            return
        if active.observer is None:
            return
        try:
            active.observer(event)
        except Exception:
            log.exception("run observer raised; ignoring")

    def _announce(self, active: RunView, trigger: str, step: int) -> Callable[[], None]:
        def started() -> None:
            self._emit(
                active,
                CompactionEvent(run_id=active.run.id, phase="started", trigger=trigger, step=step),
            )

        return started

    def _report(self, active: RunView, outcome: CompactionOutcome, step: int) -> None:
        """One event per outcome that matters to a reader; "cannot shrink" once a run."""
        phase = _PHASES.get(outcome.status)
        if outcome.status == "nothing_to_compact":
            if (
                outcome.trigger == "pressure"
                and "cannot_shrink" in self.state(active.run.id).warned
            ):
                return
            self.state(active.run.id).warned.add("cannot_shrink")
        if phase is None:
            return
        covered = None if outcome.summary is None else outcome.summary.covered_through_seq
        self._emit(
            active,
            CompactionEvent(
                run_id=active.run.id,
                phase=phase,
                trigger=outcome.trigger,
                step=step,
                detail=outcome.detail,
                generation=outcome.generation_after,
                covered_through_seq=covered,
                tokens_before=outcome.measured_tokens,
                tokens_after=outcome.tokens_after,
                insufficient=outcome.insufficient,
            ),
        )

    def succeeded(self, run_id: str) -> None:
        """A model request went through: consecutive overflow recoveries start over."""
        state = self._runs.get(run_id)
        if state is not None:
            self.service.reset_overflow(state)
