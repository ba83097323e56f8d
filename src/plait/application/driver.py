"""RunDriver: the run's state machine and the persistence order of
docs/design.md#persist-before-acting.

Persistence order of one run (the :class:`~plait.application._journal.RunJournal`'s named
points, each durable where the journal says)::

    save user message (and claim the session for the run)            -- AgentService.send
    -> ContextBuilder builds the context; ModelCaller asks the model (retries per §6);
       validate; on invalid output ask for a correction (bounded)
    -> journal.save_turn: the assistant message with its calls, run usage, ``requested``
       records (a final answer ends the run in the same commit)
    -> per call, in order (journal.result_durable first: the last result is durable):
         ToolGate decides (allow / deny / needs_approval), recorded on the record
         deny: journal.save_denial                           needs_approval: run waits
         allow: journal.start_call (durable for side effects) -> ToolRunner executes
                -> journal.save_result (written behind: during the next model call, or
                   with the next step's commit)
    -> the post-step check (compaction, :class:`CompactionStage`), after a final answer too
    -> next step, or journal.finish: end the run (completed / budget_exhausted / failed /
       cancelled; a run cancelled meanwhile ends cancelled whatever else ended it)

Every arrow after a save is a restart point. Nothing runs that was not first persisted as
requested, and nothing invalid is persisted as a tool request. No store transaction is
open while the model or a tool works.

Waiting is one mechanism: a run that needs a person (``awaiting_resolution`` for an
unknown side effect, ``awaiting_approval`` for a gated call) ends its drive with
:class:`StopRun` of that status; :data:`WAITING` lists them for cancel, recover and resume.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any

from plait.application._budget import check_budget, check_cancel, check_time_left
from plait.application._history import session_history
from plait.application._journal import RunJournal
from plait.application._lease import LeaseKeeper
from plait.application._run_state import (
    ActiveRun,
    RunResult,
    StopRun,
    UsageCounters,
    UsedCallIds,
    model_failure,
    pending_calls,
    render_rejected,
)
from plait.application.answers import ask_for_answer, check_answer
from plait.application.compaction.stage import CompactionStage, NoCompaction
from plait.application.context_builder import ContextBuilder
from plait.application.events import (
    ModelCallEnded,
    ModelCallStarted,
    RecoveryEvent,
    RunEnded,
    RunObserver,
)
from plait.application.gate import (
    ALLOWED,
    AllowAll,
    GateDecision,
    GateRequest,
    ToolGate,
    Verdict,
    policy_of,
)
from plait.application.model_caller import ModelCaller
from plait.application.ports import (
    Clock,
    ModelResponse,
    ModelRole,
    SessionStore,
    TextSink,
    Tool,
    ToolInvocation,
)
from plait.application.tool_runner import ToolRunner
from plait.application.toolset import ToolSet
from plait.application.validation import check_output
from plait.domain.context import Context, Correction, Prefix
from plait.domain.errors import (
    BudgetExhaustedError,
    InvalidModelOutputError,
    LeaseLostError,
    ModelError,
    PlaitError,
    StoreError,
    SubAgentWaitingError,
)
from plait.domain.messages import (
    AssistantMessage,
    Message,
    ToolCall,
    ToolStatus,
    Usage,
)
from plait.domain.runs import Lease, Run, RunError, RunStatus
from plait.domain.session import ExecutionRecord, ExecutionState, Session
from plait.domain.text import printable
from plait.domain.tools import EffectClass, ToolSpec

__all__ = ["WAITING", "RunDriver"]

log = logging.getLogger("plait.agent")

WAITING = frozenset({RunStatus.AWAITING_RESOLUTION, RunStatus.AWAITING_APPROVAL})
"""Statuses in which a run waits for a person: no lease, the session stays claimed."""


@dataclass(slots=True)
class _Attempts:
    """The run's side of a model call (ModelCaller's AttemptBudget)."""

    driver: RunDriver
    active: ActiveRun
    step: int

    def spend(self, role: ModelRole, attempt: int) -> None:
        self.driver.check_budget(self.active, before_model_call=True)
        self.active.usage.model_calls += 1
        journal = self.driver.journal
        if journal.listened(self.active):
            journal.emit(
                self.active, ModelCallStarted(self.active.run.id, self.step, attempt, role)
            )

    def settled(
        self, role: ModelRole, attempt: int, model: str, outcome: ModelResponse | ModelError
    ) -> None:
        if self.driver.journal.telemetry is None:
            return  # only telemetry reads it: no event to build otherwise
        if isinstance(outcome, ModelError):
            ended = ModelCallEnded(
                run_id=self.active.run.id,
                step=self.step,
                attempt=attempt,
                role=role,
                model=model,
                error_code=outcome.model_code.lower(),
            )
        else:
            ended = ModelCallEnded(
                run_id=self.active.run.id,
                step=self.step,
                attempt=attempt,
                role=role,
                model=model,
                response_model=outcome.model,
                usage=outcome.usage,
                tool_calls=len(outcome.tool_calls),
            )
        self.driver.journal.emit(self.active, ended)

    @property
    def deadline(self) -> float | None:
        return self.active.deadline


@dataclass(slots=True)
class _Guard:
    """The run's side of a compaction's summarizer calls (compaction's CallGuard): each
    is checked against the run's cancellation and budgets before it is made, counted in
    the run's usage, and interruptible by a cancel like the run's own model calls."""

    driver: RunDriver
    active: ActiveRun

    def before_call(self) -> None:
        self.driver.check_budget(self.active, before_model_call=True)
        self.active.usage.model_calls += 1

    def after_call(self, usage: Usage) -> None:
        self.active.usage.input_tokens += usage.input_tokens
        self.active.usage.output_tokens += usage.output_tokens

    @contextmanager
    def interruptible(self) -> Iterator[None]:
        active = self.active
        active.interruptible = True
        try:
            yield
        except asyncio.CancelledError:
            self.driver._note_cancel(active)
            raise StopRun(RunStatus.CANCELLED, "cancelled", "the run was cancelled") from None
        finally:
            active.interruptible = False


def _recovery_plan(
    run_id: str, version: int, work: Sequence[tuple[ToolCall, ExecutionRecord]]
) -> RecoveryEvent:
    """How recovery settles the open calls, in :meth:`RunDriver._run_calls`' order (it
    stops at the first call whose outcome is unknown)."""
    rerun = idempotent = unknown = not_started = 0
    for _call, record in work:
        started = record.state is ExecutionState.STARTED
        if record.result_status is ToolStatus.UNKNOWN or (
            started and record.effect is EffectClass.SIDE_EFFECT
        ):
            unknown += 1
            break
        if record.effect is EffectClass.READ_ONLY:  # only a side effect's start is written
            rerun += 1
        elif record.effect is EffectClass.IDEMPOTENT:
            idempotent += 1
        else:
            not_started += 1
    return RecoveryEvent(
        run_id=run_id,
        phase="started",
        session_version=version,
        pending=len(work),
        rerun=rerun,
        idempotent=idempotent,
        unknown=unknown,
        not_started=not_started,
    )


def _answered(active: ActiveRun) -> bool:
    """The run's last saved message is its final answer (an assistant message without
    calls): only a post-step check was left to do before it ended."""
    last = active.history[-1] if active.history else None
    return (
        isinstance(last, AssistantMessage) and last.run_id == active.run.id and not last.tool_calls
    )


class RunDriver:
    """Drives runs through their stages. Built by :class:`~plait.application.service.
    AgentService` from the collaborators :mod:`plait.runtime` composes."""

    def __init__(
        self,
        *,
        store: SessionStore,
        journal: RunJournal,
        context: ContextBuilder,
        caller: ModelCaller,
        gate: ToolGate,
        runner: ToolRunner,
        tools: Mapping[str, Tool],
        lease_seconds: float,
        compaction: CompactionStage | None = None,
        toolset: ToolSet | None = None,
    ) -> None:
        """``toolset``: where ``tools`` can change between steps (MCP servers' lists)."""
        self.store = store
        self.compaction = compaction or NoCompaction(context)
        self.journal = journal
        self.context = context
        self.caller = caller
        self.gate = gate
        self.runner = runner
        self.tools = tools
        self.specs = {name: t.spec for name, t in tools.items()}
        self.toolset = toolset
        self._tools_version = toolset.version if toolset is not None else 0
        self.lease_seconds = lease_seconds
        self.leases = LeaseKeeper(store, journal, lease_seconds)
        self.active: dict[str, ActiveRun] = {}

    @property
    def clock(self) -> Clock:
        return self.journal.clock

    @property
    def owner(self) -> str:
        return self.journal.owner

    # --- taking a run in hand ---------------------------------------------------------------

    def activate(
        self,
        run: Run,
        session: Session,
        version: int,
        history: list[Message],
        observer: RunObserver | None,
        on_text: TextSink | None = None,
    ) -> ActiveRun:
        if run.deadline_at is not None:  # absolute: a recovered run keeps it
            deadline = self.clock.monotonic() + (run.deadline_at - self.clock.now())
        elif run.budget.deadline_seconds is not None:  # a run stored before deadline_at
            deadline = self.clock.monotonic() + run.budget.deadline_seconds
        else:
            deadline = None
        return ActiveRun(
            run=run,
            usage=UsageCounters.of(run.usage),
            session=session,
            version=version,
            history=history,
            used_call_ids=UsedCallIds(history),
            deadline=deadline,
            observer=observer,
            task=asyncio.current_task(),
            cancel_requested=run.cancel_requested,
            on_text=on_text,
        )

    async def take_over(
        self,
        run: Run,
        *,
        observer: RunObserver | None,
        status: RunStatus | None = None,
        on_text: TextSink | None = None,
        caller: ModelCaller | None = None,
        force: bool = False,
    ) -> ActiveRun:
        """Claim a run's lease and rebuild its in-process state from the store. The run's
        absolute deadline, step and model-call usage carry on. ``force``: claim it even
        though the lease ``run`` shows has not expired (an operator knows its process is
        gone); a lease renewed since ``run`` was read still wins."""
        now = self.clock.now()
        at = max(now, run.lease.expires_at) if force and run.lease is not None else now
        claimed = await self.store.claim_run(
            run.id, owner=self.owner, now=at, expires_at=now + self.lease_seconds
        )
        if status is not None and claimed.status is not status:
            claimed = replace(claimed, status=status, error=None)
        session, history = await session_history(self.store, claimed.session_id)
        active = self.activate(claimed, session, session.version, history, observer, on_text)
        active.caller = caller
        return active

    async def drive(self, active: ActiveRun, *, pending: bool, how: str = "recovered") -> RunResult:
        """Run the loop until the run ends or waits; ``pending``: first settle the calls
        of the last assistant message that have no result (recovery, resume). ``how``
        this process came to drive a run taken over (telemetry: ``recovered``,
        ``claimed``, ``resumed``); a run that is not ``pending`` was just started (its
        telemetry segment began with its first write)."""
        self.active[active.run.id] = active
        policy = policy_of(self.gate)  # it decides the calls from here
        if active.run.policy != policy:
            active.run = replace(active.run, policy=policy)
        telemetry = self.journal.telemetry
        if telemetry is not None and pending:  # a started run began with its first write
            context = telemetry.begin(active.run, how)
            if context is not None:  # stored with the run's next write
                active.run = replace(active.run, trace_context=context)
        heartbeat = asyncio.create_task(self.leases.keep(active))
        try:
            await self._loop(active, pending=pending, recovering=pending and how == "recovered")
            await self.journal.result_durable(active)
        except BaseException as error:
            if telemetry is not None:
                telemetry.end(active.run, error)
            await self.journal.abandon(active)
            raise
        finally:
            heartbeat.cancel()
            self.active.pop(active.run.id, None)
            self.compaction.release(active.run.id)  # a view kept for a next step
        self.journal.emit(active, RunEnded(active.run))
        if telemetry is not None:
            telemetry.end(active.run)
        if active.external_cancel:
            raise asyncio.CancelledError
        return RunResult(active.run, tuple(active.added))

    async def hold_cut_short(self, active: ActiveRun, *, why: str) -> bool:
        """A running run taken over to be ended (a forced cancel): a call whose start was
        recorded and that has no result may have acted, so it is settled ``unknown`` and
        the run waits for a person (as recovery does) instead of claiming it was not
        executed. A read-only call that started has no effect: it may be cancelled.
        Returns whether the run now awaits resolution."""
        for call, record in await self._pending_work(active):
            if record.result_status is ToolStatus.UNKNOWN or (
                record.state is ExecutionState.STARTED
                and record.effect is not EffectClass.READ_ONLY
            ):
                note = (
                    record.note
                    or f"{why} while this call was running; whether its effect happened is unknown"
                )
                unknown = replace(record, result_status=ToolStatus.UNKNOWN, note=note)
                error = RunError(
                    code="unknown_effect",
                    message=f"call {call.id} ({call.name}): {note}; a person must resolve it",
                )
                await self.journal.finish(active, RunStatus.AWAITING_RESOLUTION, error, (unknown,))
                return True
        return False

    async def close_pending(self, active: ActiveRun, *, why: str) -> None:
        """Pair every open call of the run (unknown ones as ``unknown``)."""
        await self.journal.settle_unstarted(active, await self._pending_work(active), why)

    # --- the loop ---------------------------------------------------------------------------

    async def _loop(self, active: ActiveRun, *, pending: bool, recovering: bool = False) -> None:
        guard = _Guard(self, active)
        try:
            await self.sync_tools()  # a resumed call finds the tools of now
            if recovering:
                await self._recover_calls(active, await self._pending_work(active))
            elif pending:
                await self._run_calls(active, await self._pending_work(active))
            self.compaction.check_run(active)  # a model it cannot measure: before any call
            if pending and _answered(active):  # stopped in its final answer's post-step check
                await self._post_step(active, guard)
                check_cancel(active)
                await self.journal.finish(active, RunStatus.COMPLETED, None)
                return
            while True:
                calls = await self._step(active, guard)
                if not calls:
                    return
                await self._run_calls(active, calls)
                await self._post_step(active, guard)
        except StopRun as stop:
            if stop.status is not RunStatus.CANCELLED:
                await self.journal.result_durable(active)  # a cancel seen by the result in flight
                if active.cancel_requested:  # cancel has final priority, whatever else ended
                    stop = await self._cancelled_instead(active, stop)
            await self.journal.finish(active, stop.status, stop.error, stop.executions)
        except LeaseLostError:
            log.debug("run %s: fenced off (its lease was taken over); stopping", active.run.id)
            raise
        except StoreError:
            raise  # the store failed: the run stays running, and is recovered later
        except Exception as error:
            log.exception("run %s: internal error; the run fails", active.run.id)
            await self._fail(active, error)

    async def _recover_calls(
        self, active: ActiveRun, work: Sequence[tuple[ToolCall, ExecutionRecord]]
    ) -> None:
        """:meth:`_run_calls` for a run taken over, reported as its recovery (events:
        telemetry's ``recover_run`` span)."""
        self.journal.emit(active, _recovery_plan(active.run.id, active.version, work))
        try:
            await self._run_calls(active, work)
        except StopRun as stop:
            failed = stop.status in (RunStatus.FAILED, RunStatus.BUDGET_EXHAUSTED)
            code = stop.error.code if failed else ""
            settled = RecoveryEvent(
                run_id=active.run.id, phase="settled", status=stop.status.value, error_code=code
            )
            self.journal.emit(active, settled)
            raise
        except BaseException as error:
            code = error.code if isinstance(error, PlaitError) else type(error).__name__
            self.journal.emit(
                active,
                RecoveryEvent(run_id=active.run.id, phase="settled", status="", error_code=code),
            )
            raise
        status = RunStatus.RUNNING.value
        self.journal.emit(
            active, RecoveryEvent(run_id=active.run.id, phase="settled", status=status)
        )

    async def _fail(self, active: ActiveRun, error: Exception) -> None:
        """End the run ``failed`` after an unexpected error, every call of its last step
        paired: one that never started ``failed``, a side effect that started ``unknown``
        (then the run waits for resolution instead). The state is read back from the store
        first: what the run held in memory may not have been written."""
        await self.journal.abandon(active)
        why = f"internal error: {type(error).__name__}: {printable(str(error), 500)}"
        session = await self.store.get_session(active.session.id)
        active.version = session.version
        active.history = [s.message for s in await self.store.read_messages(active.session.id)]
        work = await self._pending_work(active)
        for call, record in work:
            if record.state is ExecutionState.STARTED and record.effect is EffectClass.SIDE_EFFECT:
                note = f"{why}; whether its effect happened is unknown"
                unknown = replace(record, result_status=ToolStatus.UNKNOWN, note=note)
                waiting = RunError(
                    code="unknown_effect",
                    message=f"call {call.id} ({call.name}): {note}; a person must resolve it",
                )
                await self.journal.finish(
                    active, RunStatus.AWAITING_RESOLUTION, waiting, (unknown,)
                )
                return
        await self.journal.settle_unstarted(active, work, why, ToolStatus.FAILED)
        await self.journal.finish(
            active, RunStatus.FAILED, RunError(code="internal_error", message=why)
        )

    async def _post_step(self, active: ActiveRun, guard: _Guard) -> None:
        """The RFC's post-step checkpoint (the step's results are in ``a.history``; the
        last one is made durable only if a compaction reads the stored history)."""
        if type(self.compaction) is NoCompaction:  # compaction off: no post-step work
            return
        await self.compaction.post_step(
            active, durable=functools.partial(self.journal.result_durable, active), guard=guard
        )

    async def _cancelled_instead(self, active: ActiveRun, stop: StopRun) -> StopRun:
        """The run was cancelled while it ended (or began to wait) for another reason:
        it ends ``cancelled``. Calls a waiting run held open are paired first (an unknown
        outcome stays ``unknown``)."""
        cancelled = StopRun(RunStatus.CANCELLED, "cancelled", "the run was cancelled")
        if stop.status.terminal:
            return cancelled
        held = {r.call_id: r for r in stop.executions}
        work = [(c, held.get(c.id, r)) for c, r in await self._pending_work(active)]
        await self.journal.settle_unstarted(active, work, "the run was cancelled")
        return cancelled

    async def _pending_work(self, active: ActiveRun) -> list[tuple[ToolCall, ExecutionRecord]]:
        """Calls of the run's last assistant message that have no result yet, each with
        its execution record."""
        calls = pending_calls(active.history, active.run.id)
        if not calls:
            return []
        records = {r.call_id: r for r in await self.store.get_executions(active.run.id)}
        now = self.clock.now()
        return [
            (c, records.get(c.id) or self.journal.record(active, c, self.tool(active, c.name), now))
            for c in calls
        ]

    def check_budget(self, active: ActiveRun, *, before_model_call: bool) -> None:
        """Raise StopRun when the run was cancelled or a budget is spent."""
        caps = (active.caller or self.caller).model.capabilities if before_model_call else None
        check_budget(active, self.clock.monotonic(), caps)

    async def sync_tools(self) -> None:
        """Take the tool set's new tools when it changed (a version compare otherwise):
        the model is offered them, the gate and the runner get them; a call to a tool
        that is gone fails (:meth:`_call`)."""
        toolset = self.toolset
        if toolset is None or await toolset.refresh() == self._tools_version:
            return
        self._tools_version = toolset.version
        self.tools = toolset.tools
        self.specs = {name: t.spec for name, t in toolset.tools.items()}
        self.context.use_tools(toolset.specs)
        self.compaction.use_tools(toolset.specs)

    def offered(self, active: ActiveRun) -> tuple[Mapping[str, Tool], dict[str, ToolSpec]]:
        """The tools the run is offered (and their specs by name): without a choice of
        MCP servers recorded on the run, all of them."""
        if self.toolset is None or active.run.mcp_servers is None:
            return self.tools, self.specs
        return self.toolset.chosen(active.run.mcp_servers)

    def tool(self, active: ActiveRun, name: str) -> Tool | None:
        return self.offered(active)[0].get(name)

    async def _step(
        self, active: ActiveRun, guard: _Guard
    ) -> list[tuple[ToolCall, ExecutionRecord]]:
        """One model turn: ask, validate (with corrections), save. Returns the calls."""
        budget = active.run.budget
        if budget.max_steps is not None and active.usage.steps >= budget.max_steps:
            raise StopRun.budget("max_steps", f"the run took its {budget.max_steps} steps")
        step = active.usage.steps + 1
        await self.sync_tools()
        corrections: list[Correction] = []
        attempts = _Attempts(self, active, step)
        schema = active.run.output_schema
        output: Any = None
        while True:
            self.check_budget(active, before_model_call=True)
            context = await self.compaction.context_for(active, corrections, guard)
            if active.run.mcp_servers is not None and self.toolset is not None:
                specs = tuple(self.offered(active)[1].values())
                context = replace(context, tools=specs)  # the run's choice of servers
            if schema is not None:
                native = (active.caller or self.caller).model.capabilities.structured_output
                context = ask_for_answer(context, schema, native=native)
            try:
                response = await self.ask(active, "assistant", context, attempts)
            except StopRun as stop:  # an overflow compacted away: retry as a new step
                if stop.status is RunStatus.CANCELLED:
                    raise
                await self.journal.result_durable(active)  # a compaction reads the stored history
                if not await self.compaction.recover(active, stop, step, guard):
                    raise
                return await self._step(active, guard)
            checked = check_output(response, self.offered(active)[1], active.used_call_ids)
            problems = checked.problems
            if checked.ok and not checked.calls and schema is not None:
                output, problems = check_answer(schema, response)
            if not problems:
                break
            if len(corrections) >= budget.max_corrections:
                invalid = InvalidModelOutputError(
                    f"the model's output was still invalid after {len(corrections)} "
                    f"correction(s): " + "; ".join(problems),
                    problems=list(problems),
                )
                raise StopRun(RunStatus.FAILED, invalid.code, invalid.message)
            corrections.append(
                Correction(rejected_text=render_rejected(response), problems=problems)
            )
            active.usage.corrections += 1
        return await self._save_turn(active, step, response, checked.calls, guard, output)

    async def _save_turn(
        self,
        active: ActiveRun,
        step: int,
        response: ModelResponse,
        calls: tuple[ToolCall, ...],
        guard: _Guard,
        output: Any = None,
    ) -> list[tuple[ToolCall, ExecutionRecord]]:
        now = self.clock.now()
        message = AssistantMessage(
            id=self.journal.ids.new("msg"),
            text=response.text,
            created_at=now,
            tool_calls=calls,
            run_id=active.run.id,
            step=step,
            model=response.model or (active.caller or self.caller).model.name,
            usage=response.usage,
            vendor_state=response.vendor_state,
            output=output,
        )
        # The last result may be in flight: this turn is queued behind it, or carries it
        if active.cancel_requested:
            raise StopRun(RunStatus.CANCELLED, "cancelled", "the run was cancelled")
        active.usage.steps = step
        # A final answer ends the run in the same commit, unless the post-step check
        # after it has work (measured first: none when compaction is off or not due).
        checked = not calls and await self.compaction.due_after_answer(active, message)
        if calls or checked:
            lease = Lease(owner=self.owner, expires_at=now + self.lease_seconds)
            run = active.run.stepped(active.usage.freeze(), lease)
        else:
            run = replace(active.run, usage=active.usage.freeze()).ended(RunStatus.COMPLETED, now)
        work = await self.journal.save_turn(active, message, run, self.offered(active)[0])
        if checked:  # the post-step check of the final answer, then the run completes
            await self._post_step(active, guard)
            check_cancel(active)
            await self.journal.finish(active, RunStatus.COMPLETED, None)
        return work

    async def ask(
        self,
        active: ActiveRun,
        role: ModelRole,
        context: Context[Any],
        attempts: _Attempts | None = None,
        *,
        time_limit: float | None = None,
    ) -> ModelResponse:
        """One model call for the run through the ModelCaller; its failures end the run
        (StopRun). The response's usage is added to the run's."""
        attempts = attempts or _Attempts(self, active, active.usage.steps)
        active.interruptible = True
        try:
            # Inside the try: the timeout's own cancellation leaves as TimeoutError, never
            # as a cancel of the run. Without a limit there is no timeout to arm.
            on_text = active.on_text if role == "assistant" else None
            call = (active.caller or self.caller).call(role, context, attempts, on_text=on_text)
            if time_limit is None:
                response = await call
            else:
                async with asyncio.timeout(time_limit):
                    response = await call
        except asyncio.CancelledError:
            self._note_cancel(active)
            raise StopRun(RunStatus.CANCELLED, "cancelled", "the run was cancelled") from None
        except StopRun:
            raise
        except Exception as error:
            stop = model_failure(error, role, time_limit)
            if not isinstance(error, TimeoutError | PlaitError):
                log.exception("model %s raised", (active.caller or self.caller).model.name)
            raise stop from (None if isinstance(error, BudgetExhaustedError) else error)
        finally:
            active.interruptible = False
        active.usage.input_tokens += response.usage.input_tokens
        active.usage.output_tokens += response.usage.output_tokens
        return response

    def _note_cancel(self, active: ActiveRun) -> None:
        """A CancelledError reached the loop: ours (cancel()) or the caller's task."""
        if not active.cancel_requested:
            active.external_cancel = True
            active.cancel_requested = True
        task = active.task
        if task is not None:
            while task.uncancel():
                pass

    # --- calls ------------------------------------------------------------------------------

    async def _run_calls(
        self, active: ActiveRun, calls: Sequence[tuple[ToolCall, ExecutionRecord]]
    ) -> None:
        for index, (call, record) in enumerate(calls):
            if record.result_status is ToolStatus.UNKNOWN:
                raise StopRun(
                    RunStatus.AWAITING_RESOLUTION,
                    "unknown_effect",
                    f"call {call.id} ({call.name}) has an unknown outcome; resolve it first",
                )
            if record.state is ExecutionState.STARTED and record.effect is EffectClass.SIDE_EFFECT:
                # Started before a crash, result never saved: it may or may not have acted.
                note = (
                    "the process stopped while this call was running; whether its effect "
                    "happened is unknown"
                )
                raise StopRun(
                    RunStatus.AWAITING_RESOLUTION,
                    "unknown_effect",
                    f"call {call.id} ({call.name}): {note}; a person must resolve it",
                    (replace(record, result_status=ToolStatus.UNKNOWN, note=note),),
                )
            # The previous call's result is durable (its cancel flag seen) before this call.
            await self.journal.result_durable(active)
            try:
                self.check_budget(active, before_model_call=False)
                check_time_left(active, self.clock.monotonic(), call, record)
            except StopRun as stop:
                await self.journal.settle_unstarted(active, calls[index:], stop.error.message)
                raise
            try:
                await self._call(active, call, record)
            except StopRun as stop:
                if stop.status.terminal:  # it ended the run while the call was reviewed
                    await self.journal.settle_unstarted(active, calls[index:], stop.error.message)
                raise
            active.usage.tool_calls += 1

    async def _call(self, active: ActiveRun, call: ToolCall, record: ExecutionRecord) -> None:
        """One call: review, then (if allowed) execute and save its result."""
        tool = self.tool(active, call.name)
        if tool is None:
            why = f"tool {call.name!r} is no longer available"
            await self.journal.settle_unstarted(active, [(call, record)], why, ToolStatus.FAILED)
            return
        try:
            decision = await self._review(active, call, record, tool)
        except (StopRun, LeaseLostError, StoreError):
            raise
        except Exception as error:  # fail closed: this call never runs, the run goes on
            why = (
                f"the tool gate could not decide about this call ({type(error).__name__}: "
                f"{printable(str(error), 500)}); it was not executed"
            )
            log.error("run %s: call %s failed: %s", active.run.id, call.id, why)
            await self.journal.settle_unstarted(active, [(call, record)], why, ToolStatus.FAILED)
            return
        now = self.clock.now()
        allowed = decision.verdict is Verdict.ALLOW
        reviewed = record.decided(
            ExecutionState.STARTED if allowed else ExecutionState.REVIEWED,
            now,
            str(decision.verdict),  # its value (a StrEnum), without the property call
            decision.decided_by,
            decision.reason,
        )
        if allowed:  # reviewed and started at once
            await self._execute(active, call, reviewed, tool)
            return
        if decision.verdict is Verdict.DENY:
            await self.journal.save_denial(active, call, reviewed, decision)
            return
        raise StopRun(
            RunStatus.AWAITING_APPROVAL,
            "approval_required",
            f"call {call.id} ({call.name}) needs approval: {decision.reason}",
            (reviewed,),
        )

    async def _review(
        self, active: ActiveRun, call: ToolCall, record: ExecutionRecord, tool: Tool
    ) -> GateDecision:
        if type(self.gate) is AllowAll:  # no policy: nothing of the call to look at
            return self.journal.decided(active, call, ALLOWED)

        async def reviewer(
            context: Context[Any], *, time_limit: float | None = None
        ) -> ModelResponse:
            return await self.ask(active, "reviewer", context, time_limit=time_limit)

        request = GateRequest(
            call=call,
            spec=tool.spec,
            effect=record.effect,
            record=record,
            session=active.session,
            run=active.run,
            reviewer=reviewer,
            history=Prefix(active.history),
            on_review=functools.partial(self.journal.emit, active),
        )
        return self.journal.decided(active, call, await self.gate.decide(request))

    async def _execute(
        self, active: ActiveRun, call: ToolCall, record: ExecutionRecord, tool: Tool
    ) -> None:
        await self.journal.start_call(active, call, record)  # a side effect's start: durable
        budget = active.run.budget
        limit = None if tool.own_deadline else budget.tool_timeout_seconds
        if active.deadline is not None and record.effect is not EffectClass.SIDE_EFFECT:
            left = max(active.deadline - self.clock.monotonic(), 0.0)
            limit = left if limit is None else min(limit, left)
        invocation = ToolInvocation(
            call=call,
            session_id=active.session.id,
            run_id=active.run.id,
            workspace=active.session.workspace,
            idempotency_key=record.idempotency_key,
            output_cap_bytes=budget.tool_output_cap_bytes,
            time_limit_seconds=limit,
        )
        active.interruptible = tool.stoppable
        try:
            result = await self.runner.run(
                tool,
                invocation,
                record.effect,
                time_limit=limit,
                on_cancel=lambda: self._note_cancel(active),
            )
        except SubAgentWaitingError as error:  # executed again when the run is resumed
            raise StopRun(
                RunStatus.AWAITING_APPROVAL,
                "approval_required",
                f"call {call.id} ({call.name}): {error.message}",
                (record,),
            ) from None
        finally:
            active.interruptible = False
        self.journal.hit("tool_returned")
        if result.status is ToolStatus.UNKNOWN:
            raise StopRun(
                RunStatus.AWAITING_RESOLUTION,
                "unknown_effect",
                f"call {call.id} ({call.name}): {result.reason}; a person must resolve it",
                (replace(record, result_status=ToolStatus.UNKNOWN, note=result.reason),),
            )
        # Written behind (the next model call is no side effect): see RunJournal.save_result
        self.journal.save_result(active, call, record, result)
