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
CompactionEvent` (started, then activated / failed / skipped). Summarizer calls are
charged to the run (model calls and tokens). ``auto=False`` makes the stage register
nothing automatic: no pressure check, no overflow recovery.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Literal, Protocol

from plait.application._run_state import StopRun
from plait.application.compaction._context import ContextView
from plait.application.compaction._profiles import ModelProfile
from plait.application.compaction.estimate import EstimateMeter
from plait.application.compaction.service import (
    CompactionOutcome,
    CompactionService,
    RunCompaction,
)
from plait.application.events import CompactionEvent, RunObserver
from plait.application.ports import ModelClient
from plait.domain.context import Context, Correction
from plait.domain.errors import ModelError, ModelErrorCode, TokenMeterModelUnconfiguredError
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
        self, a: RunView, corrections: Sequence[Correction]
    ) -> Context[AssistantMessage]:
        return self.builder.assistant(a.history, corrections)

    async def post_step(self, a: RunView, durable: Durable | None = None) -> None:
        return None

    def release(self, run_id: str) -> None:
        return None

    async def recover(self, a: RunView, stop: StopRun, step: int) -> bool:
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

    def state(self, run_id: str) -> RunCompaction:
        s = self._runs.get(run_id)
        if s is None:
            s = self._runs[run_id] = RunCompaction()
            if len(self._runs) > self._max:
                self._runs.popitem(last=False)
        return s

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

    def _run_state(self, a: RunView) -> RunCompaction:
        """The run's counters; until counted since this process (again) drives the run,
        its compactions are counted from the stored summaries when the cap matters (the
        per-run cap holds across recoveries)."""
        state = self.state(a.run.id)
        state.since = a.run.started_at
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
    ) -> ContextView:
        """``reuse``: a view built before, returned if nothing it was built from changed."""
        return await self.service.assembler.build(
            session_id,
            history,
            profile=self._profile(model),
            instructions=self.instructions,
            tools=self.tools,
            output_type=AssistantMessage,
            corrections=tuple(corrections),
            reuse=reuse,
        )

    async def assistant_context(
        self,
        session_id: str,
        history: list[Message],
        model: str,
        corrections: Sequence[Correction] = (),
    ) -> Context[AssistantMessage]:
        view = await self.view(session_id, history, model, corrections)
        context: Context[AssistantMessage] = view.context
        return context

    def _charge(self, run: RunView, outcome: CompactionOutcome | None) -> None:
        if outcome is None:
            return
        run.usage.model_calls += outcome.summarizer_calls
        run.usage.input_tokens += outcome.summarizer_input_tokens
        run.usage.output_tokens += outcome.summarizer_output_tokens
        if outcome.status in ("failed", "skipped"):
            log.warning("compaction (%s) %s: %s", outcome.trigger, outcome.status, outcome.detail)

    # --- the driver's side ------------------------------------------------------------------

    def _routed(self, a: RunView) -> str:
        caller = getattr(a, "caller", None)  # a run continuing with its own recorded model
        if caller is not None and caller.has_model:
            self.service.profiles.learn(caller.model)
        return a.run.model or self.service.routed_model(a.history) or ""

    @staticmethod
    def _run_model(a: RunView) -> ModelClient | None:
        """The model the run is driven with (the summarizer, unless one is configured)."""
        caller = getattr(a, "caller", None)
        return caller.model if caller is not None and caller.has_model else None

    async def context_for(
        self, a: RunView, corrections: Sequence[Correction]
    ) -> Context[AssistantMessage]:
        """The context of the run's next call: the one its post-step check measured, when
        nothing it was built from changed since (else built afresh)."""
        state = self.state(a.run.id)
        measured, state.measured = state.measured, None
        view = await self.view(a.session.id, a.history, self._routed(a), corrections, measured)
        state.last_measured = view.tokens.total
        context: Context[AssistantMessage] = view.context
        return context

    def _calibrate(self, a: RunView) -> None:
        """Teach the routed model's calibration what the provider reported for the step's
        request against what its meter counted."""
        state = self._runs.get(a.run.id)
        last = next((m for m in reversed(a.history) if isinstance(m, AssistantMessage)), None)
        if state is None or not state.last_measured or last is None or last.usage is None:
            return
        try:
            profile = self.service.profiles.get(self._routed(a))
        except TokenMeterModelUnconfiguredError:
            return
        profile.calibration.observe(state.last_measured, last.usage.input_tokens)
        state.last_measured = 0

    async def post_step(self, a: RunView, durable: Durable | None = None) -> None:
        """After the step's assistant message and all its results (``durable`` makes
        them durable; awaited before compacting). An unknown routed model ends the run
        (``token_meter_model_unconfigured``); any other failure of the compaction is
        reported (a ``failed`` event) and the run goes on with the full history."""
        self.succeeded(a.run.id)
        self._calibrate(a)
        if not self.auto:
            return
        step = a.usage.steps
        try:
            outcome = await self.service.after_step(
                a.session.id,
                a.history,
                run=self._run_state(a),
                instructions=self.instructions,
                tools=self.tools,
                model=self._routed(a),
                on_start=self._announce(a, "pressure", step),
                before_compacting=durable,
                run_model=self._run_model(a),
            )
        except TokenMeterModelUnconfiguredError as e:
            raise StopRun(RunStatus.FAILED, e.code, e.message) from e
        except Exception as e:  # operational: say so and go on with the full history
            log.exception("post-step compaction of run %s raised; going on", a.run.id)
            self._emit(a, CompactionEvent(
                run_id=a.run.id, phase="failed", trigger="pressure", step=step,
                detail=f"{type(e).__name__}: {e}",
            ))  # fmt: skip
            return
        self._charge(a, outcome)
        if outcome is not None:
            self._report(a, outcome, step)

    async def recover(self, a: RunView, stop: StopRun, step: int) -> bool:
        """The RFC's overflow recovery, between the failed step and the next one. ``stop``
        ended step ``step``; if its cause is the provider's ``CONTEXT_WINDOW_EXCEEDED``,
        try at most ``max_overflow_retries`` consecutive shrinking compactions keeping the
        newest unit. True only when the session's summary generation (the model-visible
        surface) increased: step ``step`` is then closed (counted in the run's steps) and
        the driver retries as a new step. False in every other
        case (auto off, another error, attempts used up, unknown routed model, nothing to
        compact, the compaction failed or raised): the original error stands unchanged."""
        error = stop.__cause__
        if not self.auto or not isinstance(error, ModelError):
            return False
        if error.model_code != ModelErrorCode.CONTEXT_WINDOW_EXCEEDED:
            return False
        sid = a.session.id
        try:
            before = await self._generation(sid)
            outcome = await self.service.on_overflow(
                sid,
                error,
                run=self._run_state(a),
                model=self._routed(a),
                instructions=self.instructions,
                tools=self.tools,
                on_start=self._announce(a, "overflow", step),
                run_model=self._run_model(a),
            )
            after = await self._generation(sid)
        except TokenMeterModelUnconfiguredError:
            return False  # no window to shrink to: the provider's error stands
        except Exception as e:
            log.exception("overflow recovery of run %s raised; the error stands", a.run.id)
            self._emit(a, CompactionEvent(
                run_id=a.run.id, phase="failed", trigger="overflow", step=step,
                detail=f"{type(e).__name__}: {e}",
            ))  # fmt: skip
            return False
        self._charge(a, outcome)
        if outcome is None:
            return False
        self._report(a, outcome, step)
        if after <= before:
            return False
        a.usage.steps = step  # the failed step is closed: the retry is the next one
        return True

    async def _generation(self, session_id: str) -> int:
        active = await self.service.store.get_summary(session_id)
        return 0 if active is None else active.generation

    # --- events -----------------------------------------------------------------------------

    def _emit(self, a: RunView, event: CompactionEvent) -> None:
        if self._deliver is not None:
            self._deliver(a, event)
            return
        if a.observer is None:
            return
        try:
            a.observer(event)
        except Exception:
            log.exception("run observer raised; ignoring")

    def _announce(self, a: RunView, trigger: str, step: int) -> Callable[[], None]:
        def started() -> None:
            self._emit(a, CompactionEvent(
                run_id=a.run.id, phase="started", trigger=trigger, step=step
            ))  # fmt: skip

        return started

    def _report(self, a: RunView, outcome: CompactionOutcome, step: int) -> None:
        """One event per outcome that matters to a reader; "cannot shrink" once a run."""
        phase = _PHASES.get(outcome.status)
        if outcome.status == "nothing_to_compact":
            if outcome.trigger == "pressure" and "cannot_shrink" in self.state(a.run.id).warned:
                return
            self.state(a.run.id).warned.add("cannot_shrink")
        if phase is None:
            return
        covered = None if outcome.summary is None else outcome.summary.covered_through_seq
        self._emit(a, CompactionEvent(
            run_id=a.run.id, phase=phase, trigger=outcome.trigger, step=step,
            detail=outcome.detail, generation=outcome.generation_after,
            covered_through_seq=covered, tokens_before=outcome.measured_tokens,
            tokens_after=outcome.tokens_after, insufficient=outcome.insufficient,
        ))  # fmt: skip

    def succeeded(self, run_id: str) -> None:
        """A model request went through: consecutive overflow recoveries start over."""
        state = self._runs.get(run_id)
        if state is not None:
            self.service.reset_overflow(state)
