"""RunJournal: every write a run makes, fenced by its lease, and the events they emit.

The driver decides *what* to persist and *when* (DESIGN §3); the journal does the writing:
one :class:`~plait.application.ports.Commit` per persistence point, the in-process state
(:class:`ActiveRun`) updated after the store accepted it, observers told afterwards.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import cast

from plait.application._run_state import ActiveRun, idempotency_key
from plait.application.events import MessageSaved, RunEvent, ToolDecided
from plait.application.gate import GateDecision
from plait.application.ports import (
    Clock,
    Commit,
    CommitResult,
    IdGenerator,
    QueuedCommits,
    SessionStore,
    Tool,
)
from plait.domain.errors import LeaseLostError
from plait.domain.messages import (
    Message,
    ToolCall,
    ToolResult,
    ToolResultMessage,
    ToolStatus,
    argument_digest,
)
from plait.domain.runs import Run, RunError, RunStatus
from plait.domain.session import ExecutionRecord, ExecutionState, StoredMessage
from plait.domain.tools import EffectClass

__all__ = ["RunJournal"]

log = logging.getLogger("plait.agent")


@dataclass(slots=True)
class _Pending:
    """A run's commit in flight (:meth:`RunJournal.commit_behind`)."""

    future: asyncio.Future[CommitResult]
    first: int
    messages: tuple[Message, ...]
    point: str
    queued: bool
    """On a :class:`QueuedCommits` store: later commits may be queued behind it, and its
    checkpoint is hit by the store as soon as it is durable."""
    events: list[RunEvent] = field(default_factory=list)
    landed: bool = False
    """Durable, and its events told."""


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
    ) -> None:
        self.store = store
        self.clock = clock
        self.ids = ids
        self.owner = owner
        self._checkpoint = checkpoint
        self._pending: dict[str, _Pending] = {}
        queued = getattr(store, "commit_soon", None) is not None
        self._queue = cast(QueuedCommits, store) if queued else None

    def hit(self, point: str) -> None:
        """A persistence point was reached (the test-only crash hook)."""
        if self._checkpoint is not None:
            self._checkpoint(point)

    def emit(self, a: ActiveRun, event: RunEvent) -> None:
        pending = self._pending.get(a.run.id)
        if pending is not None and not pending.landed:
            pending.events.append(event)  # keep the order: after the commit's own events
            return
        self._deliver(a, event)

    def _deliver(self, a: ActiveRun, event: RunEvent) -> None:
        if a.observer is None:
            return
        try:
            a.observer(event)
        except Exception:
            log.exception("run observer raised; ignoring")

    def decided(self, a: ActiveRun, call: ToolCall, d: GateDecision) -> GateDecision:
        """Report the gate's decision (the one recorded on the call's execution record)."""
        self.emit(a, ToolDecided(a.run.id, call, d.verdict.value, d.decided_by, d.reason))
        return d

    def _check_lease(self, a: ActiveRun) -> None:
        if a.lease_lost:
            raise LeaseLostError(
                f"run {a.run.id}: this process ({self.owner}) lost the run's lease (its "
                "heartbeat could not renew it); it stops here without writing, and the "
                "process that holds the lease now carries the run on",
                run_id=a.run.id,
                owner=self.owner,
            )

    def _commit_of(
        self,
        a: ActiveRun,
        messages: tuple[Message, ...],
        run: Run | None,
        executions: tuple[ExecutionRecord, ...],
    ) -> Commit:
        return Commit(
            session_id=a.session.id,
            expected_version=a.version,
            messages=messages,
            run=run,
            executions=executions,
            lease_owner=self.owner,
        )

    async def commit(
        self,
        a: ActiveRun,
        messages: tuple[Message, ...],
        *,
        run: Run | None = None,
        executions: tuple[ExecutionRecord, ...] = (),
    ) -> None:
        """Write one commit for the run, applied after the one still in flight (if any):
        queued behind it at once on a :class:`QueuedCommits` store (which applies writes
        in order), else once it is durable. Either way that one's failure is raised
        first, and this one cannot land without it (it expects the version that one
        makes). A process whose heartbeat found the lease lost stops here, before
        writing, with a clear message."""
        pending = self._pending.get(a.run.id)
        if pending is not None and pending.queued:
            self._check_lease(a)
            assert self._queue is not None
            behind = self._queue.commit_soon(self._commit_of(a, messages, run, executions))
            behind.add_done_callback(_seen)  # raised below, unless the first one failed
            await self.durable(a)
            result = await behind
        else:
            await self.durable(a)
            self._check_lease(a)
            result = await self.store.commit(self._commit_of(a, messages, run, executions))
        if run is not None:
            a.run = run
        first = a.version + 1
        a.version = result.version
        a.history.extend(messages)
        self._saved(a, first, messages, result)

    def _saved(
        self, a: ActiveRun, first: int, messages: tuple[Message, ...], result: CommitResult
    ) -> None:
        if result.cancel_requested:
            a.cancel_requested = True
        for n, message in enumerate(messages):
            stored = StoredMessage(first + n, message)
            a.added.append(stored)
            self.emit(a, MessageSaved(a.run.id, stored))

    def commit_behind(
        self,
        a: ActiveRun,
        messages: tuple[Message, ...],
        executions: tuple[ExecutionRecord, ...],
        point: str,
    ) -> None:
        """Start a commit the run need not wait for yet (a tool result: the next model
        call is no side effect). The history takes the messages at once; the commit is
        durable, its events are told and checkpoint ``point`` is hit when :meth:`durable`
        sees it done, which every later commit and every tool execution awaits first (its
        failure stops the run there, as if it had been awaited at once)."""
        if a.run.id in self._pending:
            raise RuntimeError(f"run {a.run.id}: a commit is already in flight")
        self._check_lease(a)
        commit = self._commit_of(a, messages, None, executions)
        future: asyncio.Future[CommitResult]
        if self._queue is not None:
            hook = None if self._checkpoint is None else functools.partial(self.hit, point)
            future = self._queue.commit_soon(commit, after=hook, hold=True)
        else:
            future = asyncio.ensure_future(self.store.commit(commit))
        pending = _Pending(future, a.version + 1, messages, point, self._queue is not None)
        self._pending[a.run.id] = pending
        a.version += len(messages)
        a.history.extend(messages)
        # Its events are told as soon as it lands (a model call may still be running).
        future.add_done_callback(lambda _: self._landed(a, pending))

    def _landed(self, a: ActiveRun, pending: _Pending) -> None:
        """The commit in flight is durable: its events, then those held back behind it.
        (A failure is left for :meth:`durable` to raise.)"""
        f = pending.future
        if pending.landed or not f.done() or f.cancelled() or f.exception() is not None:
            return
        pending.landed = True
        self._saved(a, pending.first, pending.messages, f.result())
        for event in pending.events:
            self._deliver(a, event)
        pending.events.clear()

    async def durable(self, a: ActiveRun) -> None:
        """Wait until the run's commit in flight (if any) is durable; raises its error.
        Its checkpoint is hit before anything later is written: by the store, right after
        it (a queued commit), or here."""
        pending = self._pending.get(a.run.id)
        if pending is None:
            return
        try:
            await pending.future
            self._landed(a, pending)
        finally:
            del self._pending[a.run.id]
        if not pending.queued:
            self.hit(pending.point)

    async def abandon(self, a: ActiveRun) -> None:
        """The run stops on another error: let its commit in flight land, and only log
        that commit's own failure."""
        try:
            await self.durable(a)
        except Exception as e:
            log.warning("run %s: the commit in flight failed as well: %s", a.run.id, e)

    async def finish(
        self,
        a: ActiveRun,
        status: RunStatus,
        error: RunError | None,
        executions: tuple[ExecutionRecord, ...] = (),
    ) -> None:
        """End the run (terminal status), or make it wait for a person (the lease is
        released, the session stays claimed)."""
        current = replace(a.run, usage=a.usage.freeze())
        if status.terminal:
            run = current.ended(status, self.clock.now(), error)
        else:
            run = replace(current, status=status, error=error, lease=None)
        await self.commit(a, (), run=run, executions=executions)

    def record(
        self, a: ActiveRun, call: ToolCall, tool: Tool | None, now: float
    ) -> ExecutionRecord:
        """The ``requested`` record of a validated call; its effect class is fixed here."""
        if tool is None:
            effect = EffectClass.SIDE_EFFECT
        elif tool.effect_of is not None:
            effect = EffectClass(tool.effect_of(call.arguments()))
        else:
            effect = tool.spec.effect
        return ExecutionRecord(
            session_id=a.session.id,
            run_id=a.run.id,
            call_id=call.id,
            tool_name=call.name,
            effect=effect,
            args_digest=argument_digest(call.arguments_json),
            idempotency_key=idempotency_key(a.session.id, a.run.id, call.id),
            state=ExecutionState.REQUESTED,
            requested_at=now,
        )

    def result_message(
        self, a: ActiveRun, call: ToolCall, result: ToolResult, at: float | None = None
    ) -> ToolResultMessage:
        return ToolResultMessage(
            id=self.ids.new("msg"),
            tool_name=call.name,
            result=result,
            created_at=self.clock.now() if at is None else at,
            run_id=a.run.id,
            step=a.usage.steps,
        )

    async def settle(
        self, a: ActiveRun, call: ToolCall, record: ExecutionRecord, result: ToolResult
    ) -> None:
        """Save a call's result and its settled record in one commit."""
        message, settled = self._settled(a, call, record, result)
        await self.commit(a, (message,), executions=(settled,))

    def settle_behind(
        self, a: ActiveRun, call: ToolCall, record: ExecutionRecord, result: ToolResult
    ) -> None:
        """:meth:`settle` as a commit in flight (see :meth:`commit_behind`): checkpoint
        ``result_saved`` is hit once it is durable."""
        message, settled = self._settled(a, call, record, result)
        self.commit_behind(a, (message,), (settled,), "result_saved")

    def _settled(
        self, a: ActiveRun, call: ToolCall, record: ExecutionRecord, result: ToolResult
    ) -> tuple[ToolResultMessage, ExecutionRecord]:
        """A call's result message and its record, settled with that result."""
        message = self.result_message(a, call, result)
        settled = replace(
            record,
            state=ExecutionState.SETTLED,
            settled_at=message.created_at,
            result_status=result.status,
        )
        return message, settled

    async def settle_unstarted(
        self,
        a: ActiveRun,
        calls: Iterable[tuple[ToolCall, ExecutionRecord]],
        why: str,
        status: ToolStatus = ToolStatus.CANCELLED,
    ) -> None:
        """Give every call that never started a result (``cancelled`` by default; an
        unresolved ``unknown`` one stays ``unknown``), in one commit, so no call is left
        unpaired."""
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
            messages.append(self.result_message(a, call, result, now))
            settled.append(
                replace(
                    record,
                    state=ExecutionState.SETTLED,
                    settled_at=now,
                    result_status=result.status,
                )
            )
        if messages:
            await self.commit(a, tuple(messages), executions=tuple(settled))
