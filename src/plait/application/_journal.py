"""RunJournal: a run's persistence points, each one commit fenced by the run's lease, the
events they emit, and when each becomes durable.

The persistence points of one step, in the seed's order (docs/design.md#persist-before-acting):

=====================  =======================================  ===========================
point                  what it writes                           durable
=====================  =======================================  ===========================
save the user message  (``AgentService.send``, with the run)    when ``send`` starts it
:meth:`save_turn`      the assistant message, its calls'        on return (with the result
                       ``requested`` records, the run's usage;  in flight, if not sent yet:
                       a final answer ends the run in it        one transaction)
:meth:`save_denial`    a denied call's result                   on return
:meth:`start_call`     a side effect's ``started`` record       on return (other effect
                       (other calls write nothing)              classes: nothing to write)
:meth:`save_result`    a call's result and settled record       in flight: by the next
                                                                point, or :meth:`result_
                                                                durable`
:meth:`settle_unstarted`  results for calls that never ran      on return
:meth:`finish`         the run's end, or its wait for a person  on return
=====================  =======================================  ===========================

A result is written behind (the next model call is no side effect): it is sent as soon as
the run suspends, so it becomes durable while the model works, and every later point waits
for it first, queued behind it on the store (:class:`~plait.application.ports.
QueuedCommits`: every store applies commits queued this way in order). If the run did not
suspend before its next commit, both go as one transaction. :meth:`result_durable` is the
wait itself, for the places that read what was stored (a compaction) or act on the result's
outcome (the next call, the run's end).
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import cast

from plait.application._run_state import ActiveRun, idempotency_key
from plait.application.events import MessageSaved, RunEvent, ToolDecided, ToolStarted
from plait.application.gate import GateDecision
from plait.application.ports import (
    Clock,
    Commit,
    CommitResult,
    IdGenerator,
    QueuedCommits,
    RunTelemetry,
    SessionStore,
    Tool,
)
from plait.domain.errors import LeaseLostError
from plait.domain.messages import (
    AssistantMessage,
    Message,
    ToolCall,
    ToolResult,
    ToolResultMessage,
    ToolStatus,
)
from plait.domain.runs import Run, RunError, RunStatus
from plait.domain.session import ExecutionRecord, ExecutionState, StoredMessage
from plait.domain.tools import EffectClass

__all__ = ["RunJournal"]

log = logging.getLogger("plait.agent")


@dataclass(slots=True)
class _InFlight:
    """A run's result commit written behind (:meth:`RunJournal.save_result`): sent to the
    store at the run's next suspension, unless the run's next commit comes first and
    takes it in."""

    expected: int
    """The session version it expects."""
    messages: tuple[Message, ...]
    executions: tuple[ExecutionRecord, ...]
    point: str
    """Its checkpoint, hit by the store as soon as it is durable."""
    future: asyncio.Future[CommitResult] | None = None
    """None until sent."""
    send: asyncio.Handle | None = None
    """The scheduled send (while not sent)."""
    events: list[RunEvent] = field(default_factory=list)
    landed: bool = False
    """Durable, and its events told."""

    @property
    def first(self) -> int:
        return self.expected + 1

    def takes(self, executions: tuple[ExecutionRecord, ...]) -> bool:
        """Whether a commit with ``executions`` may carry this one along: not sent yet,
        and no execution record of both (a record is checked against its stored state)."""
        if self.future is not None:
            return False
        mine = {record.key for record in self.executions}
        return not any(record.key in mine for record in executions)


def _seen(future: asyncio.Future[CommitResult]) -> None:
    """Mark a commit's failure as retrieved (it was raised, or another one's was)."""
    if not future.cancelled():
        future.exception()


class RunJournal:
    def __init__(
        self,
        *,
        store: SessionStore,
        clock: Clock,
        ids: IdGenerator,
        owner: str,
        checkpoint: Callable[[str], None] | None = None,
        telemetry: RunTelemetry | None = None,
    ) -> None:
        self.store = store
        self.telemetry = telemetry
        """Told of every run event, whoever observes the run (``None``: off)."""
        self.clock = clock
        self.ids = ids
        self.owner = owner
        self._checkpoint = checkpoint
        self._in_flight: dict[str, _InFlight] = {}
        if not callable(getattr(store, "commit_soon", None)):
            raise TypeError(f"{store!r} cannot queue commits (no commit_soon: QueuedCommits)")
        self._queue = cast(QueuedCommits, store)

    def hit(self, point: str) -> None:
        """A persistence point was reached (the test-only crash hook)."""
        if self._checkpoint is not None:
            self._checkpoint(point)

    # --- events -----------------------------------------------------------------------------

    def listened(self, active: ActiveRun) -> bool:
        """Whether anyone is told of the run's events (its observer, telemetry): a step's
        events are not even built otherwise."""
        return active.observer is not None or self.telemetry is not None

    def emit(self, active: ActiveRun, event: RunEvent) -> None:
        in_flight = self._in_flight.get(active.run.id)
        if in_flight is not None and not in_flight.landed:
            in_flight.events.append(event)  # keep the order: after the commit's own events
            return
        self._deliver(active, event)

    def _deliver(self, active: ActiveRun, event: RunEvent) -> None:
        if self.telemetry is not None:
            self.telemetry.observe(event)
        if active.observer is None:
            return
        try:
            active.observer(event)
        except Exception:
            log.exception("run observer raised; ignoring")

    def decided(self, active: ActiveRun, call: ToolCall, decision: GateDecision) -> GateDecision:
        """Report the gate's decision (the one recorded on the call's execution record)."""
        if self.listened(active):
            self.emit(
                active,
                ToolDecided(
                    active.run.id,
                    call,
                    decision.verdict.value,
                    decision.decided_by,
                    decision.reason,
                ),
            )
        return decision

    # --- the persistence points -------------------------------------------------------------

    async def save_turn(
        self,
        active: ActiveRun,
        message: AssistantMessage,
        run: Run,
        tools: Mapping[str, Tool],
    ) -> list[tuple[ToolCall, ExecutionRecord]]:
        """Save the assistant message with its calls' ``requested`` records and the run's
        state (``run``: its usage; ended when the message is a final answer), in one
        commit, durable on return (checkpoint ``assistant_saved``). Returns the calls, each
        with its record."""
        calls = message.tool_calls
        records = tuple(
            self.record(active, call, tools.get(call.name), message.created_at) for call in calls
        )
        await self.commit(active, (message,), run=run, executions=records)
        active.used_call_ids.update(call.id for call in calls)
        self.hit("assistant_saved")
        return list(zip(calls, records, strict=True))

    async def start_call(self, active: ActiveRun, call: ToolCall, record: ExecutionRecord) -> None:
        """A call is about to execute (``record``: reviewed and started). Only a side
        effect's start changes what recovery may do: it is durable before the call runs
        (checkpoint ``execution_started``); the start of any other call is not written."""
        if record.effect is EffectClass.SIDE_EFFECT:
            await self.commit(active, (), executions=(record,))
            self.hit("execution_started")
        if self.listened(active):
            self.emit(active, ToolStarted(active.run.id, call, record.effect.value))

    def save_result(
        self, active: ActiveRun, call: ToolCall, record: ExecutionRecord, result: ToolResult
    ) -> None:
        """Save a call's result and its settled record, written behind: the history takes
        the message at once, the commit is sent as soon as the run suspends (so it is
        written while the model works), unless the run's next commit comes first and
        carries it (one transaction). It is durable, its events are told and checkpoint
        ``result_saved`` is hit when it lands; every later point waits for it first (its
        failure stops the run there, as if it had been awaited at once).

        With a crash hook (tests), it is sent at once and never carried: every persistence
        point of the crash matrix then exists. Carrying only removes the state between two
        commits (both land in one transaction), it never makes a new one."""
        message, settled = self._settled(active, call, record, result)
        if active.run.id in self._in_flight:
            raise RuntimeError(f"run {active.run.id}: a commit is already in flight")
        self._check_lease(active)
        in_flight = _InFlight(active.version, (message,), (settled,), "result_saved")
        self._in_flight[active.run.id] = in_flight
        active.version += 1
        active.history.append(message)
        if self._checkpoint is None:
            in_flight.send = asyncio.get_running_loop().call_soon(self._send_now, active, in_flight)
        else:
            self._send_now(active, in_flight)

    async def save_denial(
        self, active: ActiveRun, call: ToolCall, record: ExecutionRecord, decision: GateDecision
    ) -> None:
        """Save a denied call's result (with its reviewed record), durable on return."""
        reason = f"denied by {decision.decided_by}: {decision.reason}"
        result = ToolResult(
            call_id=call.id, status=ToolStatus.DENIED, content=reason, reason=reason
        )
        message, settled = self._settled(active, call, record, result)
        await self.commit(active, (message,), executions=(settled,))

    async def settle_unstarted(
        self,
        active: ActiveRun,
        calls: Iterable[tuple[ToolCall, ExecutionRecord]],
        why: str,
        status: ToolStatus = ToolStatus.CANCELLED,
    ) -> None:
        """Give every call that never started a result (``cancelled`` by default; an
        unresolved ``unknown`` one stays ``unknown``), in one commit, durable on return,
        so no call is left unpaired."""
        now = self.clock.now()
        messages: list[Message] = []
        settled: list[ExecutionRecord] = []
        for call, record in calls:
            if record.result_status is ToolStatus.UNKNOWN:
                result = ToolResult(
                    call_id=call.id,
                    status=ToolStatus.UNKNOWN,
                    content=f"outcome unknown, never resolved: {record.note}",
                    reason=why,
                )
            else:
                result = ToolResult(
                    call_id=call.id, status=status, content=f"not executed: {why}", reason=why
                )
            messages.append(self.result_message(active, call, result, now))
            settled.append(
                replace(
                    record,
                    state=ExecutionState.SETTLED,
                    settled_at=now,
                    result_status=result.status,
                )
            )
        if messages:
            await self.commit(active, tuple(messages), executions=tuple(settled))

    async def finish(
        self,
        active: ActiveRun,
        status: RunStatus,
        error: RunError | None,
        executions: tuple[ExecutionRecord, ...] = (),
    ) -> None:
        """End the run (terminal status), or make it wait for a person (the lease is
        released, the session stays claimed); durable on return."""
        current = replace(active.run, usage=active.usage.freeze())
        if status.terminal:
            run = current.ended(status, self.clock.now(), error)
        else:
            run = replace(current, status=status, error=error, lease=None)
        await self.commit(active, (), run=run, executions=executions)

    async def result_durable(self, active: ActiveRun) -> None:
        """Wait until the run's result in flight (if any) is durable; raises its error.
        Its checkpoint was hit by the store, right after it, before anything later."""
        in_flight = self._in_flight.get(active.run.id)
        if in_flight is None:
            return
        self._send_now(active, in_flight)
        assert in_flight.future is not None
        try:
            await in_flight.future
            self._landed(active, in_flight)
        finally:
            del self._in_flight[active.run.id]

    async def abandon(self, active: ActiveRun) -> None:
        """The run stops on another error: let its result in flight land, and only log
        that commit's own failure."""
        try:
            await self.result_durable(active)
        except LeaseLostError:
            pass  # fenced off like the rest of the run: reported once, by whoever stops it
        except Exception as error:
            log.warning("run %s: the commit in flight failed as well: %s", active.run.id, error)

    # --- one commit -------------------------------------------------------------------------

    async def commit(
        self,
        active: ActiveRun,
        messages: tuple[Message, ...],
        *,
        run: Run | None = None,
        executions: tuple[ExecutionRecord, ...] = (),
    ) -> None:
        """Write one commit for the run, applied after the result in flight (if any). If
        that one is not sent yet (the run has not suspended since: the model answered at
        once), both go as one commit, one transaction: the first is then durable exactly
        when this one is, and nothing ran in between. Else this one is queued behind it at
        once. Either way that one's failure is raised first, and this one cannot land
        without it (it expects the version that one makes). A process whose heartbeat
        found the lease lost stops here, before writing, with a clear message."""
        in_flight = self._in_flight.get(active.run.id)
        if in_flight is not None and not active.lease_lost and in_flight.takes(executions):
            await self._commit_with(active, in_flight, messages, run, executions)
            return
        if in_flight is not None:
            self._send_now(active, in_flight)  # it was fenced when it was made
            self._check_lease(active)
            behind = self._queue.commit_soon(self._commit_of(active, messages, run, executions))
            behind.add_done_callback(_seen)  # raised below, unless the first one failed
            await self.result_durable(active)
            result = await behind
        else:
            self._check_lease(active)
            result = await self.store.commit(self._commit_of(active, messages, run, executions))
        if run is not None:
            active.run = run
        first = active.version + 1
        active.version = result.version
        active.history.extend(messages)
        self._saved(active, first, messages, result)

    def _check_lease(self, active: ActiveRun) -> None:
        if active.lease_lost:
            raise LeaseLostError(
                f"run {active.run.id}: this process ({self.owner}) lost the run's lease (its "
                "heartbeat could not renew it); it stops here without writing, and the "
                "process that holds the lease now carries the run on",
                run_id=active.run.id,
                owner=self.owner,
            )

    def _commit_of(
        self,
        active: ActiveRun,
        messages: tuple[Message, ...],
        run: Run | None,
        executions: tuple[ExecutionRecord, ...],
    ) -> Commit:
        return Commit(
            session_id=active.session.id,
            expected_version=active.version,
            messages=messages,
            run=run,
            executions=executions,
            lease_owner=self.owner,
            lease_token=active.run.lease_token,
            lease_run_id=active.run.id,
        )

    def _carrying(
        self,
        active: ActiveRun,
        in_flight: _InFlight,
        messages: tuple[Message, ...] = (),
        run: Run | None = None,
        executions: tuple[ExecutionRecord, ...] = (),
    ) -> Commit:
        """The commit in flight, with what a later commit adds to it."""
        return Commit(
            session_id=active.session.id,
            expected_version=in_flight.expected,
            messages=in_flight.messages + messages,
            run=run,
            executions=in_flight.executions + executions,
            lease_owner=self.owner,
            lease_token=active.run.lease_token,
            lease_run_id=active.run.id,
        )

    async def _commit_with(
        self,
        active: ActiveRun,
        in_flight: _InFlight,
        messages: tuple[Message, ...],
        run: Run | None,
        executions: tuple[ExecutionRecord, ...],
    ) -> None:
        """:meth:`commit`, carrying the result in flight that was not sent yet. That one
        stays registered until both landed: events emitted meanwhile keep their place
        after its messages, and :meth:`result_durable` waits for the carrying commit."""
        if in_flight.send is not None:
            in_flight.send.cancel()
            in_flight.send = None
        future = self._queue.commit_soon(
            self._carrying(active, in_flight, messages, run, executions)
        )
        in_flight.future = future
        try:
            result = await future
        except Exception:
            await self._alone(active, in_flight)
            raise
        finally:
            if self._in_flight.get(active.run.id) is in_flight:
                del self._in_flight[active.run.id]
        if run is not None:
            active.run = run
        self._landed(active, in_flight)  # unless result_durable() saw it land first
        first = active.version + 1
        active.version = result.version
        active.history.extend(messages)
        self._saved(active, first, messages, result)

    async def _alone(self, active: ActiveRun, in_flight: _InFlight) -> None:
        """The commit that carried ``in_flight`` failed: save that one by itself, so that
        a tool's result is not lost with the step it rode with (its failure is logged; the
        carrying commit's is the one raised)."""
        try:
            result = await self.store.commit(self._carrying(active, in_flight))
        except LeaseLostError:
            # Fenced off: the process that took the run over recovers the call from its
            # record (docs/design.md#recovery-without-repeating-side-effects), as if this
            # one had died before the result.
            return
        except Exception as error:
            log.warning(
                "run %s: its last result could not be saved either: %s", active.run.id, error
            )
            return
        in_flight.landed = True
        self._saved(active, in_flight.first, in_flight.messages, result)
        for event in in_flight.events:
            self._deliver(active, event)

    def _saved(
        self,
        active: ActiveRun,
        first: int,
        messages: tuple[Message, ...],
        result: CommitResult,
    ) -> None:
        if result.cancel_requested:
            active.cancel_requested = True
        told = self.listened(active)
        for seq, message in enumerate(messages, first):
            stored = StoredMessage(seq, message)
            active.added.append(stored)
            if told:
                self.emit(active, MessageSaved(active.run.id, stored))

    def _send_now(self, active: ActiveRun, in_flight: _InFlight) -> None:
        """Queue the result in flight on the store (if not sent yet); the store hits its
        checkpoint as soon as it is durable, before anything queued behind it."""
        if in_flight.future is not None:
            return
        if in_flight.send is not None:
            in_flight.send.cancel()
            in_flight.send = None
        hook = None if self._checkpoint is None else functools.partial(self.hit, in_flight.point)
        future: asyncio.Future[CommitResult]
        try:
            future = self._queue.commit_soon(
                self._carrying(active, in_flight), after=hook, hold=True
            )
        except Exception as error:  # raised by result_durable(), like any failure of it
            future = asyncio.get_running_loop().create_future()
            future.set_exception(error)
        in_flight.future = future
        # Its events are told as soon as it lands (a model call may still be running).
        future.add_done_callback(lambda _: self._landed(active, in_flight))

    def _landed(self, active: ActiveRun, in_flight: _InFlight) -> None:
        """The result in flight is durable: its events, then those held back behind it.
        (A failure is left for :meth:`result_durable` to raise.)"""
        future = in_flight.future
        if (
            future is None
            or in_flight.landed
            or not future.done()
            or future.cancelled()
            or future.exception() is not None
        ):
            return
        in_flight.landed = True
        self._saved(active, in_flight.first, in_flight.messages, future.result())
        for event in in_flight.events:
            self._deliver(active, event)
        in_flight.events.clear()

    # --- what a commit holds ----------------------------------------------------------------

    def record(
        self, active: ActiveRun, call: ToolCall, tool: Tool | None, now: float
    ) -> ExecutionRecord:
        """The ``requested`` record of a validated call; its effect class is fixed here."""
        if tool is None:
            effect = EffectClass.SIDE_EFFECT
        elif tool.effect_of is not None:
            effect = EffectClass(tool.effect_of(call.arguments()))
        else:
            effect = tool.spec.effect
        return ExecutionRecord(
            session_id=active.session.id,
            run_id=active.run.id,
            call_id=call.id,
            tool_name=call.name,
            effect=effect,
            args_digest=call.argument_digest(),
            idempotency_key=idempotency_key(active.session.id, active.run.id, call.id),
            state=ExecutionState.REQUESTED,
            requested_at=now,
        )

    def result_message(
        self, active: ActiveRun, call: ToolCall, result: ToolResult, at: float | None = None
    ) -> ToolResultMessage:
        return ToolResultMessage(
            id=self.ids.new("msg"),
            tool_name=call.name,
            result=result,
            created_at=self.clock.now() if at is None else at,
            run_id=active.run.id,
            step=active.usage.steps,
        )

    def _settled(
        self, active: ActiveRun, call: ToolCall, record: ExecutionRecord, result: ToolResult
    ) -> tuple[ToolResultMessage, ExecutionRecord]:
        """A call's result message and its record, settled with that result."""
        message = self.result_message(active, call, result)
        return message, record.settled(message.created_at, result.status)
