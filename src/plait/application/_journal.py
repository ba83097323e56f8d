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
    RunTelemetry,
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
)
from plait.domain.runs import Run, RunError, RunStatus
from plait.domain.session import ExecutionRecord, ExecutionState, StoredMessage
from plait.domain.tools import EffectClass

__all__ = ["RunJournal"]

log = logging.getLogger("plait.agent")


@dataclass(slots=True)
class _Pending:
    """A run's commit in flight (:meth:`RunJournal.commit_behind`): sent to the store at
    the run's next suspension, unless the run's next commit comes first and takes it in."""

    expected: int
    """The session version it expects."""
    messages: tuple[Message, ...]
    executions: tuple[ExecutionRecord, ...]
    point: str
    queued: bool
    """On a :class:`QueuedCommits` store: later commits may be queued behind it, and its
    checkpoint is hit by the store as soon as it is durable."""
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
        mine = {e.key for e in self.executions}
        return not any(e.key in mine for e in executions)


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
        if self.telemetry is not None:
            self.telemetry.observe(event)
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
            lease_token=a.run.lease_token,
            lease_run_id=a.run.id,
        )

    def _carrying(
        self,
        a: ActiveRun,
        pending: _Pending,
        messages: tuple[Message, ...] = (),
        run: Run | None = None,
        executions: tuple[ExecutionRecord, ...] = (),
    ) -> Commit:
        """The commit in flight ``pending``, with what a later commit adds to it."""
        return Commit(
            session_id=a.session.id,
            expected_version=pending.expected,
            messages=pending.messages + messages,
            run=run,
            executions=pending.executions + executions,
            lease_owner=self.owner,
            lease_token=a.run.lease_token,
            lease_run_id=a.run.id,
        )

    async def commit(
        self,
        a: ActiveRun,
        messages: tuple[Message, ...],
        *,
        run: Run | None = None,
        executions: tuple[ExecutionRecord, ...] = (),
    ) -> None:
        """Write one commit for the run, applied after the one in flight (if any). If that
        one is not sent yet (the run has not suspended since: the model answered at once),
        both go as one commit, one transaction: the first is then durable exactly when
        this one is, and nothing ran in between. Else this one is queued behind it at once
        on a :class:`QueuedCommits` store (which applies writes in order), or sent once it
        is durable. Either way that one's failure is raised first, and this one cannot
        land without it (it expects the version that one makes). A process whose
        heartbeat found the lease lost stops here, before writing, with a clear message."""
        pending = self._pending.get(a.run.id)
        if pending is not None and not a.lease_lost and pending.takes(executions):
            await self._commit_with(a, pending, messages, run, executions)
            return
        if pending is not None and pending.queued:
            self._send_now(a, pending)  # it was fenced when it was made
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

    async def _commit_with(
        self,
        a: ActiveRun,
        pending: _Pending,
        messages: tuple[Message, ...],
        run: Run | None,
        executions: tuple[ExecutionRecord, ...],
    ) -> None:
        """:meth:`commit`, carrying the commit in flight that was not sent yet. That one
        stays registered until both landed: events emitted meanwhile keep their place
        after its messages, and :meth:`durable` waits for the carrying commit."""
        if pending.send is not None:
            pending.send.cancel()
            pending.send = None
        future = self._submit(self._carrying(a, pending, messages, run, executions))
        pending.future = future
        try:
            result = await future
        except Exception:
            await self._alone(a, pending)
            raise
        finally:
            if self._pending.get(a.run.id) is pending:
                del self._pending[a.run.id]
        if run is not None:
            a.run = run
        self._landed(a, pending)  # unless durable() saw it land first
        first = a.version + 1
        a.version = result.version
        a.history.extend(messages)
        self._saved(a, first, messages, result)

    async def _alone(self, a: ActiveRun, pending: _Pending) -> None:
        """The commit that carried ``pending`` failed: save ``pending`` by itself, so that
        a tool's result is not lost with the step it rode with (a failure is logged; the
        carrying commit's is the one raised)."""
        try:
            result = await self.store.commit(self._carrying(a, pending))
        except LeaseLostError:
            # Fenced off: the process that took the run over recovers the call from its
            # record (DESIGN section 4), as if this one had died before the result.
            return
        except Exception as e:
            log.warning("run %s: its last result could not be saved either: %s", a.run.id, e)
            return
        pending.landed = True
        self._saved(a, pending.first, pending.messages, result)
        for event in pending.events:
            self._deliver(a, event)

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
        call is no side effect). The history takes the messages at once. The commit is
        sent as soon as the run suspends (so it is written while the model works), unless
        the run's next commit comes first and carries it (see :meth:`commit`). It is
        durable, its events are told and checkpoint ``point`` is hit when :meth:`durable`
        sees it done, which every later commit and every tool execution awaits first (its
        failure stops the run there, as if it had been awaited at once).

        With a crash hook (tests), it is sent at once and never carried: every persistence
        point of the crash matrix then exists. Carrying only removes the state between
        two commits (both land in one transaction), it never makes a new one."""
        if a.run.id in self._pending:
            raise RuntimeError(f"run {a.run.id}: a commit is already in flight")
        self._check_lease(a)
        pending = _Pending(a.version, messages, executions, point, self._queue is not None)
        self._pending[a.run.id] = pending
        a.version += len(messages)
        a.history.extend(messages)
        if self._checkpoint is None:
            pending.send = asyncio.get_running_loop().call_soon(self._send_now, a, pending)
        else:
            self._send_now(a, pending)

    def _submit(
        self, commit: Commit, *, after: Callable[[], None] | None = None, hold: bool = False
    ) -> asyncio.Future[CommitResult]:
        """Start ``commit``: queued on a :class:`QueuedCommits` store (``after`` and
        ``hold`` as there), else as a task of its own."""
        if self._queue is not None:
            return self._queue.commit_soon(commit, after=after, hold=hold)
        return asyncio.ensure_future(self.store.commit(commit))

    def _send_now(self, a: ActiveRun, pending: _Pending) -> None:
        """Send the commit in flight to the store (if not sent yet)."""
        if pending.future is not None:
            return
        if pending.send is not None:
            pending.send.cancel()
            pending.send = None
        hook = None if self._checkpoint is None else functools.partial(self.hit, pending.point)
        future: asyncio.Future[CommitResult]
        try:
            future = self._submit(self._carrying(a, pending), after=hook, hold=True)
        except Exception as e:  # raised by durable(), like any failure of this commit
            future = asyncio.get_running_loop().create_future()
            future.set_exception(e)
        pending.future = future
        # Its events are told as soon as it lands (a model call may still be running).
        future.add_done_callback(lambda _: self._landed(a, pending))

    def _landed(self, a: ActiveRun, pending: _Pending) -> None:
        """The commit in flight is durable: its events, then those held back behind it.
        (A failure is left for :meth:`durable` to raise.)"""
        f = pending.future
        if (
            f is None
            or pending.landed
            or not f.done()
            or f.cancelled()
            or f.exception() is not None
        ):
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
        self._send_now(a, pending)
        assert pending.future is not None
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
        except LeaseLostError:
            pass  # fenced off like the rest of the run: reported once, by whoever stops it
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
            args_digest=call.argument_digest(),
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
