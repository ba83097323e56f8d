"""The seams between the run driver and compaction (the RFC's triggers in a run).

:class:`CompactionStage` gives the driver three things, each bound to the run it drives:

- :meth:`assistant_context`: the assistant's context with the constraint records, the
  active summary and the raw tail (``None``: nothing to add, build the plain one);
- :meth:`after_step`: the post-step checkpoint, called once the step's assistant message
  and all its tool results are persisted;
- :meth:`overflow_hook`: the ModelCaller's ``CONTEXT_WINDOW_EXCEEDED`` hook. It returns a
  rebuilt context only if a shrinking compaction raised the surface generation; otherwise
  ``None``, and the caller reports the provider's error unchanged.

Summarizer calls are charged to the run (model calls and tokens). ``auto=False`` makes
the stage register nothing automatic: no pressure check, no overflow recovery.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol

from plait.application._run_state import StopRun
from plait.application.compaction._context import ContextView
from plait.application.compaction._profiles import ModelProfile
from plait.application.compaction.estimate import EstimateMeter
from plait.application.compaction.service import (
    CompactionOutcome,
    CompactionService,
    RunCompaction,
)
from plait.domain.context import Context, Correction
from plait.domain.errors import ModelError, TokenMeterModelUnconfiguredError
from plait.domain.messages import AssistantMessage, Message
from plait.domain.runs import RunStatus
from plait.domain.tools import ToolSpec

__all__ = ["CompactionStage", "NoCompaction", "RunView"]

log = logging.getLogger("plait.compaction")

_FALLBACK = EstimateMeter("estimate (model unconfigured)")


class _Usage(Protocol):
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

    def hook_for(self, a: RunView, role: str) -> OverflowHook | None:
        return None

    async def post_step(self, a: RunView) -> None:
        return None


OverflowHook = Callable[[Any, Context[Any], ModelError], Awaitable[Context[Any] | None]]


class CompactionStage:
    def __init__(
        self,
        service: CompactionService,
        *,
        instructions: str,
        tools: tuple[ToolSpec, ...],
        max_runs_tracked: int = 1_024,
    ) -> None:
        self.service = service
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
    ) -> ContextView:
        return await self.service.assembler.build(
            session_id,
            history,
            profile=self._profile(model),
            instructions=self.instructions,
            tools=self.tools,
            output_type=AssistantMessage,
            corrections=tuple(corrections),
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

    async def after_step(
        self, session_id: str, run_id: str, run: RunView, model: str
    ) -> CompactionOutcome | None:
        """The post-step checkpoint. Raises
        :class:`~plait.domain.errors.TokenMeterModelUnconfiguredError` for a routed model
        without a meter and window (the run fails with it); a failed summary only logs."""
        if not self.auto:
            return None
        outcome = await self.service.after_step(
            session_id,
            run.history,
            run=self.state(run_id),
            instructions=self.instructions,
            tools=self.tools,
            model=model,
        )
        self._charge(run, outcome)
        return outcome

    def overflow_hook(
        self, session_id: str, run_id: str, run: RunView, model: str
    ) -> OverflowHook | None:
        """The overflow hook for one run's assistant calls (``None`` when auto is off)."""
        if not self.auto or self.service.settings.max_overflow_retries == 0:
            return None

        async def hook(role: Any, context: Context[Any], error: ModelError) -> Context[Any] | None:
            if role != "assistant":
                return None
            state = self.state(run_id)
            try:
                outcome = await self.service.on_overflow(
                    session_id,
                    error,
                    run=state,
                    model=model,
                    instructions=self.instructions,
                    tools=self.tools,
                )
            except TokenMeterModelUnconfiguredError:
                return None  # no window to shrink to: the provider's error stands
            self._charge(run, outcome)
            if outcome is None or not outcome.surface_changed:
                return None
            return await self.assistant_context(session_id, run.history, model, context.corrections)

        return hook

    # --- the driver's side ------------------------------------------------------------------

    def _routed(self, a: RunView) -> str:
        return a.run.model or self.service.routed_model(a.history) or ""

    async def context_for(
        self, a: RunView, corrections: Sequence[Correction]
    ) -> Context[AssistantMessage]:
        return await self.assistant_context(a.session.id, a.history, self._routed(a), corrections)

    def hook_for(self, a: RunView, role: str) -> OverflowHook | None:
        if role != "assistant":
            return None
        return self.overflow_hook(a.session.id, a.run.id, a, self._routed(a))

    async def post_step(self, a: RunView) -> None:
        """After the step's assistant message and all its results are persisted. An
        unknown routed model ends the run (``token_meter_model_unconfigured``)."""
        self.succeeded(a.run.id)
        try:
            await self.after_step(a.session.id, a.run.id, a, self._routed(a))
        except TokenMeterModelUnconfiguredError as e:
            raise StopRun(RunStatus.FAILED, e.code, e.message) from e

    def succeeded(self, run_id: str) -> None:
        """A model request went through: consecutive overflow recoveries start over."""
        state = self._runs.get(run_id)
        if state is not None:
            self.service.reset_overflow(state)
