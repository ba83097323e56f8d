"""RunDriver: the run's state machine and the persistence order of DESIGN §3.

Persistence order of one run::

    save user message (and claim the session for the run)            -- AgentService.send
    -> ContextBuilder builds the context; ModelCaller asks the model (retries per §6);
       validate; on invalid output ask for a correction (bounded)
    -> save the assistant message with its calls, run usage, ``requested`` records
    -> per call, in order:
         ToolGate decides (allow / deny / needs_approval), recorded on the record
         deny: save a ``denied`` result                    needs_approval: run waits
         allow: [save "started" for side effects] -> ToolRunner executes -> save result
         (written during the next model call, or with the next step's commit)
    -> the post-step check (compaction, :class:`CompactionStage`), after a final answer too
    -> next step, or end the run (completed / budget_exhausted / failed / cancelled; a
       run cancelled meanwhile ends cancelled whatever else ended it)

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
from plait.application._journal import RunJournal
from plait.application._lease import LeaseKeeper
from plait.application._run_state import (
    ActiveRun,
    RunResult,
    StopRun,
    UsageCounters,
    call_ids,
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
    ToolStarted,
)
from plait.application.gate import GateDecision, GateRequest, ToolGate, Verdict, policy_of
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
    ToolResult,
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
    a: ActiveRun
    step: int

    def spend(self, role: ModelRole, attempt: int) -> None:
        self.driver.check_budget(self.a, before_model_call=True)
        self.a.usage.model_calls += 1
        self.driver.journal.emit(self.a, ModelCallStarted(self.a.run.id, self.step, attempt, role))

    def settled(
        self, role: ModelRole, attempt: int, model: str, outcome: ModelResponse | ModelError
    ) -> None:
        if self.driver.journal.telemetry is None:
            return  # only telemetry reads it: no event to build otherwise
        if isinstance(outcome, ModelError):
            ended = ModelCallEnded(
                run_id=self.a.run.id,
                step=self.step,
                attempt=attempt,
                role=role,
                model=model,
                error_code=outcome.model_code.lower(),
            )
        else:
            ended = ModelCallEnded(
                run_id=self.a.run.id,
                step=self.step,
                attempt=attempt,
                role=role,
                model=model,
                response_model=outcome.model,
                usage=outcome.usage,
                tool_calls=len(outcome.tool_calls),
            )
        self.driver.journal.emit(self.a, ended)

    @property
    def deadline(self) -> float | None:
        return self.a.deadline


@dataclass(slots=True)
class _Guard:
    """The run's side of a compaction's summarizer calls (compaction's CallGuard): each
    is checked against the run's cancellation and budgets before it is made, counted in
    the run's usage, and interruptible by a cancel like the run's own model calls."""

    driver: RunDriver
    a: ActiveRun

    def before_call(self) -> None:
        self.driver.check_budget(self.a, before_model_call=True)
        self.a.usage.model_calls += 1

    def after_call(self, usage: Usage) -> None:
        self.a.usage.input_tokens += usage.input_tokens
        self.a.usage.output_tokens += usage.output_tokens

    @contextmanager
    def interruptible(self) -> Iterator[None]:
        a = self.a
        a.interruptible = True
        try:
            yield
        except asyncio.CancelledError:
            self.driver._note_cancel(a)
            raise StopRun(RunStatus.CANCELLED, "cancelled", "the run was cancelled") from None
        finally:
            a.interruptible = False


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


def _answered(a: ActiveRun) -> bool:
    """The run's last saved message is its final answer (an assistant message without
    calls): only a post-step check was left to do before it ended."""
    last = a.history[-1] if a.history else None
    return isinstance(last, AssistantMessage) and last.run_id == a.run.id and not last.tool_calls


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
            used_call_ids=call_ids(history),
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
        session = await self.store.get_session(claimed.session_id)
        stored = await self.store.read_messages(claimed.session_id)
        history = [s.message for s in stored]
        a = self.activate(claimed, session, session.version, history, observer, on_text)
        a.caller = caller
        return a

    async def drive(self, a: ActiveRun, *, pending: bool, how: str = "recovered") -> RunResult:
        """Run the loop until the run ends or waits; ``pending``: first settle the calls
        of the last assistant message that have no result (recovery, resume). ``how``
        this process came to drive a run taken over (telemetry: ``recovered``,
        ``claimed``, ``resumed``); a run that is not ``pending`` was just started (its
        telemetry segment began with its first write)."""
        self.active[a.run.id] = a
        a.run = replace(a.run, policy=policy_of(self.gate))  # it decides the calls from here
        telemetry = self.journal.telemetry
        if telemetry is not None and pending:  # a started run began with its first write
            context = telemetry.begin(a.run, how)
            if context is not None:  # stored with the run's next write
                a.run = replace(a.run, trace_context=context)
        heartbeat = asyncio.create_task(self.leases.keep(a))
        try:
            await self._loop(a, pending=pending, recovering=pending and how == "recovered")
            await self.journal.durable(a)
        except BaseException as e:
            if telemetry is not None:
                telemetry.end(a.run, e)
            await self.journal.abandon(a)
            raise
        finally:
            heartbeat.cancel()
            self.active.pop(a.run.id, None)
            self.compaction.release(a.run.id)  # a view kept for a next step
        self.journal.emit(a, RunEnded(a.run))
        if telemetry is not None:
            telemetry.end(a.run)
        if a.external_cancel:
            raise asyncio.CancelledError
        return RunResult(a.run, tuple(a.added))

    async def hold_cut_short(self, a: ActiveRun, *, why: str) -> bool:
        """A running run taken over to be ended (a forced cancel): a call whose start was
        recorded and that has no result may have acted, so it is settled ``unknown`` and
        the run waits for a person (as recovery does) instead of claiming it was not
        executed. A read-only call that started has no effect: it may be cancelled.
        Returns whether the run now awaits resolution."""
        for call, record in await self._pending_work(a):
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
                await self.journal.finish(a, RunStatus.AWAITING_RESOLUTION, error, (unknown,))
                return True
        return False

    async def close_pending(self, a: ActiveRun, *, why: str) -> None:
        """Pair every open call of the run (unknown ones as ``unknown``)."""
        await self.journal.settle_unstarted(a, await self._pending_work(a), why)

    # --- the loop ---------------------------------------------------------------------------

    async def _loop(self, a: ActiveRun, *, pending: bool, recovering: bool = False) -> None:
        guard = _Guard(self, a)
        try:
            await self.sync_tools()  # a resumed call finds the tools of now
            if recovering:
                await self._recover_calls(a, await self._pending_work(a))
            elif pending:
                await self._run_calls(a, await self._pending_work(a))
            self.compaction.check_run(a)  # a model it cannot measure: before any call
            if pending and _answered(a):  # stopped in its final answer's post-step check
                await self._post_step(a, guard)
                check_cancel(a)
                await self.journal.finish(a, RunStatus.COMPLETED, None)
                return
            while True:
                calls = await self._step(a, guard)
                if not calls:
                    return
                await self._run_calls(a, calls)
                await self._post_step(a, guard)
        except StopRun as stop:
            if stop.status is not RunStatus.CANCELLED:
                await self.journal.durable(a)  # a cancel seen by the commit in flight
                if a.cancel_requested:  # cancel has final priority, whatever else ended
                    stop = await self._cancelled_instead(a, stop)
            await self.journal.finish(a, stop.status, stop.error, stop.executions)
        except LeaseLostError:
            log.debug("run %s: fenced off (its lease was taken over); stopping", a.run.id)
            raise
        except StoreError:
            raise  # the store failed: the run stays running, and is recovered later
        except Exception as e:
            log.exception("run %s: internal error; the run fails", a.run.id)
            await self._fail(a, e)

    async def _recover_calls(
        self, a: ActiveRun, work: Sequence[tuple[ToolCall, ExecutionRecord]]
    ) -> None:
        """:meth:`_run_calls` for a run taken over, reported as its recovery (events:
        telemetry's ``recover_run`` span)."""
        self.journal.emit(a, _recovery_plan(a.run.id, a.version, work))
        try:
            await self._run_calls(a, work)
        except StopRun as stop:
            failed = stop.status in (RunStatus.FAILED, RunStatus.BUDGET_EXHAUSTED)
            code = stop.error.code if failed else ""
            settled = RecoveryEvent(
                run_id=a.run.id, phase="settled", status=stop.status.value, error_code=code
            )
            self.journal.emit(a, settled)
            raise
        except BaseException as e:
            code = e.code if isinstance(e, PlaitError) else type(e).__name__
            self.journal.emit(
                a, RecoveryEvent(run_id=a.run.id, phase="settled", status="", error_code=code)
            )
            raise
        status = RunStatus.RUNNING.value
        self.journal.emit(a, RecoveryEvent(run_id=a.run.id, phase="settled", status=status))

    async def _fail(self, a: ActiveRun, e: Exception) -> None:
        """End the run ``failed`` after an unexpected error, every call of its last step
        paired: one that never started ``failed``, a side effect that started ``unknown``
        (then the run waits for resolution instead). The state is read back from the store
        first: what the run held in memory may not have been written."""
        await self.journal.abandon(a)
        why = f"internal error: {type(e).__name__}: {printable(str(e), 500)}"
        session = await self.store.get_session(a.session.id)
        a.version = session.version
        a.history = [s.message for s in await self.store.read_messages(a.session.id)]
        work = await self._pending_work(a)
        for call, record in work:
            if record.state is ExecutionState.STARTED and record.effect is EffectClass.SIDE_EFFECT:
                note = f"{why}; whether its effect happened is unknown"
                unknown = replace(record, result_status=ToolStatus.UNKNOWN, note=note)
                error = RunError(
                    code="unknown_effect",
                    message=f"call {call.id} ({call.name}): {note}; a person must resolve it",
                )
                await self.journal.finish(a, RunStatus.AWAITING_RESOLUTION, error, (unknown,))
                return
        await self.journal.settle_unstarted(a, work, why, ToolStatus.FAILED)
        await self.journal.finish(a, RunStatus.FAILED, RunError(code="internal_error", message=why))

    async def _post_step(self, a: ActiveRun, guard: _Guard) -> None:
        """The RFC's post-step checkpoint (the step's results are in ``a.history``; the
        last one is made durable only if a compaction reads the stored history)."""
        await self.compaction.post_step(
            a, durable=functools.partial(self.journal.durable, a), guard=guard
        )

    async def _cancelled_instead(self, a: ActiveRun, stop: StopRun) -> StopRun:
        """The run was cancelled while it ended (or began to wait) for another reason:
        it ends ``cancelled``. Calls a waiting run held open are paired first (an unknown
        outcome stays ``unknown``)."""
        cancelled = StopRun(RunStatus.CANCELLED, "cancelled", "the run was cancelled")
        if stop.status.terminal:
            return cancelled
        held = {r.call_id: r for r in stop.executions}
        work = [(c, held.get(c.id, r)) for c, r in await self._pending_work(a)]
        await self.journal.settle_unstarted(a, work, "the run was cancelled")
        return cancelled

    async def _pending_work(self, a: ActiveRun) -> list[tuple[ToolCall, ExecutionRecord]]:
        """Calls of the run's last assistant message that have no result yet, each with
        its execution record."""
        calls = pending_calls(a.history, a.run.id)
        if not calls:
            return []
        records = {r.call_id: r for r in await self.store.get_executions(a.run.id)}
        now = self.clock.now()
        return [
            (c, records.get(c.id) or self.journal.record(a, c, self.tool(a, c.name), now))
            for c in calls
        ]

    def check_budget(self, a: ActiveRun, *, before_model_call: bool) -> None:
        """Raise StopRun when the run was cancelled or a budget is spent."""
        caps = (a.caller or self.caller).model.capabilities if before_model_call else None
        check_budget(a, self.clock.monotonic(), caps)

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

    def offered(self, a: ActiveRun) -> tuple[Mapping[str, Tool], dict[str, ToolSpec]]:
        """The tools the run is offered (and their specs by name): without a choice of
        MCP servers recorded on the run, all of them."""
        if self.toolset is None or a.run.mcp_servers is None:
            return self.tools, self.specs
        return self.toolset.chosen(a.run.mcp_servers)

    def tool(self, a: ActiveRun, name: str) -> Tool | None:
        return self.offered(a)[0].get(name)

    async def _step(self, a: ActiveRun, guard: _Guard) -> list[tuple[ToolCall, ExecutionRecord]]:
        """One model turn: ask, validate (with corrections), save. Returns the calls."""
        b = a.run.budget
        if b.max_steps is not None and a.usage.steps >= b.max_steps:
            raise StopRun.budget("max_steps", f"the run took its {b.max_steps} steps")
        step = a.usage.steps + 1
        await self.sync_tools()
        corrections: list[Correction] = []
        attempts = _Attempts(self, a, step)
        schema = a.run.output_schema
        output: Any = None
        while True:
            self.check_budget(a, before_model_call=True)
            context = await self.compaction.context_for(a, corrections, guard)
            if a.run.mcp_servers is not None and self.toolset is not None:
                specs = tuple(self.offered(a)[1].values())
                context = replace(context, tools=specs)  # the run's choice of servers
            if schema is not None:
                native = (a.caller or self.caller).model.capabilities.structured_output
                context = ask_for_answer(context, schema, native=native)
            try:
                response = await self.ask(a, "assistant", context, attempts)
            except StopRun as stop:  # an overflow compacted away: retry as a new step
                if stop.status is RunStatus.CANCELLED:
                    raise
                await self.journal.durable(a)  # a compaction reads the stored history
                if not await self.compaction.recover(a, stop, step, guard):
                    raise
                return await self._step(a, guard)
            checked = check_output(response, self.offered(a)[1], a.used_call_ids)
            problems = checked.problems
            if checked.ok and not checked.calls and schema is not None:
                output, problems = check_answer(schema, response)
            if not problems:
                break
            if len(corrections) >= b.max_corrections:
                e = InvalidModelOutputError(
                    f"the model's output was still invalid after {len(corrections)} "
                    f"correction(s): " + "; ".join(problems),
                    problems=list(problems),
                )
                raise StopRun(RunStatus.FAILED, e.code, e.message)
            corrections.append(
                Correction(rejected_text=render_rejected(response), problems=problems)
            )
            a.usage.corrections += 1
        return await self._save_turn(a, step, response, checked.calls, guard, output)

    async def _save_turn(
        self,
        a: ActiveRun,
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
            run_id=a.run.id,
            step=step,
            model=response.model or (a.caller or self.caller).model.name,
            usage=response.usage,
            vendor_state=response.vendor_state,
            output=output,
        )
        # The last result's commit may be in flight: this one is queued behind it (see commit)
        if a.cancel_requested:
            raise StopRun(RunStatus.CANCELLED, "cancelled", "the run was cancelled")
        a.usage.steps = step
        # A final answer ends the run in the same commit, unless the post-step check
        # after it has work (measured first: none when compaction is off or not due).
        checked = not calls and await self.compaction.due_after_answer(a, message)
        if calls or checked:
            lease = Lease(owner=self.owner, expires_at=now + self.lease_seconds)
            run = replace(a.run, usage=a.usage.freeze(), lease=lease)
        else:
            run = replace(a.run, usage=a.usage.freeze()).ended(RunStatus.COMPLETED, now)
        records = tuple(self.journal.record(a, c, self.tool(a, c.name), now) for c in calls)
        await self.journal.commit(a, (message,), run=run, executions=records)
        a.used_call_ids.update(c.id for c in calls)
        self.journal.hit("assistant_saved")
        if checked:  # the post-step check of the final answer, then the run completes
            await self._post_step(a, guard)
            check_cancel(a)
            await self.journal.finish(a, RunStatus.COMPLETED, None)
        return list(zip(calls, records, strict=True))

    async def ask(
        self,
        a: ActiveRun,
        role: ModelRole,
        context: Context[Any],
        attempts: _Attempts | None = None,
        *,
        time_limit: float | None = None,
    ) -> ModelResponse:
        """One model call for the run through the ModelCaller; its failures end the run
        (StopRun). The response's usage is added to the run's."""
        attempts = attempts or _Attempts(self, a, a.usage.steps)
        a.interruptible = True
        try:
            # Inside the try: the timeout's own cancellation leaves as TimeoutError, never
            # as a cancel of the run.
            async with asyncio.timeout(time_limit):
                response = await (a.caller or self.caller).call(
                    role, context, attempts, on_text=a.on_text if role == "assistant" else None
                )  # fmt: skip
        except asyncio.CancelledError:
            self._note_cancel(a)
            raise StopRun(RunStatus.CANCELLED, "cancelled", "the run was cancelled") from None
        except StopRun:
            raise
        except Exception as e:
            stop = model_failure(e, role, time_limit)
            if not isinstance(e, TimeoutError | PlaitError):
                log.exception("model %s raised", (a.caller or self.caller).model.name)
            raise stop from (None if isinstance(e, BudgetExhaustedError) else e)
        finally:
            a.interruptible = False
        a.usage.input_tokens += response.usage.input_tokens
        a.usage.output_tokens += response.usage.output_tokens
        return response

    def _note_cancel(self, a: ActiveRun) -> None:
        """A CancelledError reached the loop: ours (cancel()) or the caller's task."""
        if not a.cancel_requested:
            a.external_cancel = True
            a.cancel_requested = True
        task = a.task
        if task is not None:
            while task.uncancel():
                pass

    # --- calls ------------------------------------------------------------------------------

    async def _run_calls(
        self, a: ActiveRun, calls: Sequence[tuple[ToolCall, ExecutionRecord]]
    ) -> None:
        for n, (call, record) in enumerate(calls):
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
            await self.journal.durable(a)
            try:
                self.check_budget(a, before_model_call=False)
                check_time_left(a, self.clock.monotonic(), call, record)
            except StopRun as stop:
                await self.journal.settle_unstarted(a, calls[n:], stop.error.message)
                raise
            try:
                await self._call(a, call, record)
            except StopRun as stop:
                if stop.status.terminal:  # it ended the run while the call was reviewed
                    await self.journal.settle_unstarted(a, calls[n:], stop.error.message)
                raise
            a.usage.tool_calls += 1

    async def _call(self, a: ActiveRun, call: ToolCall, record: ExecutionRecord) -> None:
        """One call: review, then (if allowed) execute and save its result."""
        tool = self.tool(a, call.name)
        if tool is None:
            why = f"tool {call.name!r} is no longer available"
            await self.journal.settle_unstarted(a, [(call, record)], why, ToolStatus.FAILED)
            return
        try:
            decision = await self._review(a, call, record, tool)
        except (StopRun, LeaseLostError, StoreError):
            raise
        except Exception as e:  # fail closed: this call never runs, the run goes on
            why = (
                f"the tool gate could not decide about this call ({type(e).__name__}: "
                f"{printable(str(e), 500)}); it was not executed"
            )
            log.error("run %s: call %s failed: %s", a.run.id, call.id, why)
            await self.journal.settle_unstarted(a, [(call, record)], why, ToolStatus.FAILED)
            return
        now = self.clock.now()
        allowed = decision.verdict is Verdict.ALLOW
        reviewed = replace(
            record,
            state=ExecutionState.STARTED if allowed else ExecutionState.REVIEWED,
            reviewed_at=now,
            started_at=now if allowed else None,
            decision=decision.verdict.value,
            decided_by=decision.decided_by,
            decision_reason=decision.reason,
        )
        if allowed:  # reviewed and started at once
            await self._execute(a, call, reviewed, tool)
            return
        if decision.verdict is Verdict.DENY:
            reason = f"denied by {decision.decided_by}: {decision.reason}"
            result = ToolResult(
                call_id=call.id, status=ToolStatus.DENIED, content=reason, reason=reason
            )
            await self.journal.settle(a, call, reviewed, result)
            return
        raise StopRun(
            RunStatus.AWAITING_APPROVAL,
            "approval_required",
            f"call {call.id} ({call.name}) needs approval: {decision.reason}",
            (reviewed,),
        )

    async def _review(
        self, a: ActiveRun, call: ToolCall, record: ExecutionRecord, tool: Tool
    ) -> GateDecision:
        async def reviewer(
            context: Context[Any], *, time_limit: float | None = None
        ) -> ModelResponse:
            return await self.ask(a, "reviewer", context, time_limit=time_limit)

        request = GateRequest(
            call=call, spec=tool.spec, effect=record.effect, record=record, session=a.session,
            run=a.run, reviewer=reviewer, history=Prefix(a.history),
            on_review=functools.partial(self.journal.emit, a),
        )  # fmt: skip
        return self.journal.decided(a, call, await self.gate.decide(request))

    async def _execute(
        self, a: ActiveRun, call: ToolCall, record: ExecutionRecord, tool: Tool
    ) -> None:
        if record.effect is EffectClass.SIDE_EFFECT:
            # Only here does "started" change what recovery may do: persist it first.
            await self.journal.commit(a, (), executions=(record,))
            self.journal.hit("execution_started")
        self.journal.emit(a, ToolStarted(a.run.id, call, record.effect.value))
        b = a.run.budget
        invocation = ToolInvocation(
            call=call,
            session_id=a.session.id,
            run_id=a.run.id,
            workspace=a.session.workspace,
            idempotency_key=record.idempotency_key,
            output_cap_bytes=b.tool_output_cap_bytes,
        )
        limit = None if tool.own_deadline else b.tool_timeout_seconds
        if a.deadline is not None and record.effect is not EffectClass.SIDE_EFFECT:
            left = max(a.deadline - self.clock.monotonic(), 0.0)
            limit = left if limit is None else min(limit, left)
        a.interruptible = tool.stoppable
        try:
            result = await self.runner.run(
                tool,
                invocation,
                record.effect,
                time_limit=limit,
                on_cancel=lambda: self._note_cancel(a),
            )
        except SubAgentWaitingError as e:  # executed again when the run is resumed
            raise StopRun(
                RunStatus.AWAITING_APPROVAL,
                "approval_required",
                f"call {call.id} ({call.name}): {e.message}",
                (record,),
            ) from None
        finally:
            a.interruptible = False
        self.journal.hit("tool_returned")
        if result.status is ToolStatus.UNKNOWN:
            raise StopRun(
                RunStatus.AWAITING_RESOLUTION,
                "unknown_effect",
                f"call {call.id} ({call.name}): {result.reason}; a person must resolve it",
                (replace(record, result_status=ToolStatus.UNKNOWN, note=result.reason),),
            )
        # Not awaited (the next model call is no side effect): see RunJournal.commit_behind
        self.journal.settle_behind(a, call, record, result)
