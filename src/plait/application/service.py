"""AgentService: sessions, runs, and recovery — the application's public API.

Persistence order of one run (DESIGN §3)::

    save user message (and claim the session for the run)           -- one commit
    -> ask the model; validate; on invalid output ask for a correction (bounded)
    -> save the assistant message with its calls, run usage, execution records -- one commit
    -> per call, in order: [record "started" for side effects] -> execute -> save result
    -> next step, or end the run (completed / budget_exhausted / failed / cancelled)

Every arrow after a save is a restart point (DESIGN §4): :meth:`AgentService.recover`
finds runs whose lease expired and continues each from its last persisted point.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from plait.application._loop import RunLoop
from plait.application._run_state import (
    ActiveRun,
    RunResult,
    UsageCounters,
    call_ids,
    idempotency_key,
)
from plait.application.events import MessageSaved, RunEnded, RunObserver, RunStarted
from plait.application.ports import (
    ArtifactStore,
    Clock,
    Commit,
    IdGenerator,
    ModelClient,
    SessionStore,
    Tool,
)
from plait.domain.errors import (
    ConfigError,
    LeaseLostError,
    RunStateError,
    ValidationError,
)
from plait.domain.messages import (
    Message,
    ToolResult,
    ToolResultMessage,
    ToolStatus,
    UserMessage,
)
from plait.domain.runs import Budget, Lease, Run, RunError, RunStatus
from plait.domain.session import ExecutionState, Session, StoredMessage

__all__ = [
    "DEFAULT_INSTRUCTIONS",
    "AgentService",
    "RecoveryReport",
    "RunResult",
    "idempotency_key",
]

DEFAULT_INSTRUCTIONS = (
    "You are a careful coding assistant working in the user's workspace. Use the tools to "
    "read before you change anything, keep to the user's constraints, and answer plainly "
    "when the task is done."
)


@dataclass(frozen=True, slots=True)
class RecoveryReport:
    run_id: str
    outcome: str
    """``resumed`` (this process took the run over and drove it on), or ``skipped``."""
    detail: str
    result: RunResult | None = None


class AgentService(RunLoop):
    """Runs the agent loop over the ports it is given. Build it with
    :class:`plait.runtime.Runtime` or directly with fakes in tests.

    ``checkpoint`` is a test-only hook called with the name of each persistence point
    (``user_saved``, ``assistant_saved``, ``execution_started``, ``tool_returned``,
    ``result_saved``) right after it is reached; crash tests kill the process there.
    """

    def __init__(
        self,
        *,
        store: SessionStore,
        artifacts: ArtifactStore,
        model: ModelClient | None,
        tools: Sequence[Tool] = (),
        clock: Clock,
        ids: IdGenerator,
        instructions: str = DEFAULT_INSTRUCTIONS,
        budget: Budget | None = None,
        owner: str | None = None,
        lease_seconds: float = 60.0,
        checkpoint: Callable[[str], None] | None = None,
    ) -> None:
        names = [t.spec.name for t in tools]
        if len(set(names)) != len(names):
            raise ConfigError(f"tool names must be unique, got {names}")
        if lease_seconds <= 0:
            raise ConfigError("lease_seconds must be positive")
        self.store = store
        self.artifacts = artifacts
        self._model = model
        self.clock = clock
        self.ids = ids
        self.instructions = instructions
        self.budget = budget or Budget()
        self.owner = owner or ids.new("worker")
        self.lease_seconds = lease_seconds
        self._tools = {t.spec.name: t for t in tools}
        self._specs = {t.spec.name: t.spec for t in tools}
        self._spec_tuple = tuple(self._specs.values())
        self._active = {}
        self._checkpoint = checkpoint

    # --- sessions ---------------------------------------------------------------------------

    async def create_session(
        self, *, workspace: str | None = None, owner: str | None = None, title: str | None = None
    ) -> Session:
        session = Session(
            id=self.ids.new("ses"),
            created_at=self.clock.now(),
            owner=owner,
            workspace=workspace,
            title=title,
        )
        await self.store.create_session(session)
        return session

    async def history(self, session_id: str) -> list[StoredMessage]:
        await self.store.get_session(session_id)  # unknown id -> SessionNotFoundError
        return await self.store.read_messages(session_id)

    async def get_run(self, run_id: str) -> Run:
        return await self.store.get_run(run_id)

    # --- running ----------------------------------------------------------------------------

    async def send(
        self,
        session_id: str,
        text: str,
        *,
        budget: Budget | None = None,
        observer: RunObserver | None = None,
    ) -> RunResult:
        """Append a user message and run the loop until the run ends or waits.

        Raises :class:`~plait.domain.errors.SessionBusyError` if the session already has an
        active run (here or in another process); nothing is written then.
        """
        if not isinstance(text, str) or not text.strip():
            raise ValidationError("the message text is empty")
        budget = budget or self.budget
        if self._tools and not self.model.capabilities.tool_calls:
            raise ConfigError(
                f"model {self.model.name!r} cannot call tools, but this agent has "
                f"{len(self._tools)} tools; choose a model with tool calling"
            )
        session = await self.store.get_session(session_id)
        stored = await self.store.read_messages(session_id)
        now = self.clock.now()
        run_id = self.ids.new("run")
        run = Run(
            id=run_id,
            session_id=session_id,
            status=RunStatus.RUNNING,
            budget=budget,
            started_at=now,
            model=self.model.name,
            lease=Lease(owner=self.owner, expires_at=now + self.lease_seconds),
        )
        user = UserMessage(id=self.ids.new("msg"), text=text, created_at=now, run_id=run_id)
        result = await self.store.start_run(
            Commit(
                session_id=session_id,
                expected_version=session.version,
                messages=(user,),
                run=run,
                lease_owner=self.owner,
            )
        )
        history = [s.message for s in stored]
        history.append(user)
        a = self._activate(run, session, result.version, history, observer)
        a.added.append(StoredMessage(result.version, user))
        self._emit(a, RunStarted(run))
        self._emit(a, MessageSaved(run_id, a.added[-1]))
        self._hit("user_saved")
        return await self._drive(a, pending=False)

    # --- service mode: queued runs (a worker drives them) ---------------------------------

    async def submit(self, session_id: str, text: str, *, budget: Budget | None = None) -> Run:
        """Store a user message and a ``queued`` run for it in one commit and return at
        once; a worker (:class:`plait.application.worker.Worker`) runs it. Raises
        :class:`~plait.domain.errors.SessionBusyError` like :meth:`send`."""
        if not isinstance(text, str) or not text.strip():
            raise ValidationError("the message text is empty")
        session = await self.store.get_session(session_id)
        now = self.clock.now()
        run = Run(
            id=self.ids.new("run"),
            session_id=session_id,
            status=RunStatus.QUEUED,
            budget=budget or self.budget,
            started_at=now,
        )
        user = UserMessage(id=self.ids.new("msg"), text=text, created_at=now, run_id=run.id)
        await self.store.start_run(
            Commit(
                session_id=session_id, expected_version=session.version, messages=(user,), run=run
            )
        )
        return run

    async def execute(self, run: Run, *, observer: RunObserver | None = None) -> RunResult:
        """Drive a queued run this process claimed (its lease owner is :attr:`owner`)
        from its user message on, as recovery would."""
        model = self.model
        a = await self._take_over(run, observer=observer, status=RunStatus.RUNNING)
        a.run = replace(a.run, model=model.name)
        # Persist "running" first: from here on a dead worker's run is recovered.
        await self._commit(a, (), run=a.run)
        self._emit(a, RunStarted(a.run))
        return await self._drive(a, pending=True)

    async def cancel(self, run_id: str) -> Run:
        """Ask a run to stop. A run driven by this process stops at once (a running
        stoppable call is interrupted); a run in another process sees the request at its
        next commit. A run waiting for resolution is ended here: its pending calls get
        ``cancelled`` results and an unresolved one an ``unknown`` result."""
        active = self._active.get(run_id)
        if active is not None:
            active.cancel_requested = True
            if active.interruptible and active.task is not None:
                active.task.cancel()
            return active.run
        current = await self.store.get_run(run_id)
        if current.status.terminal:
            return current  # nothing to cancel; nothing written
        run = await self.store.request_cancel(run_id)
        if run.status is RunStatus.QUEUED:
            return await self._cancel_queued(run)
        if run.status is not RunStatus.AWAITING_RESOLUTION:
            return run
        a = await self._take_over(run, observer=None)
        await self._close_pending(a, why="the run was cancelled while awaiting resolution")
        cancelled = RunError(code="cancelled", message="the run was cancelled")
        await self._finish(a, RunStatus.CANCELLED, cancelled)
        return a.run

    async def _cancel_queued(self, run: Run) -> Run:
        """End a queued run no worker holds; one a worker claimed sees the request."""
        try:
            a = await self._take_over(run, observer=None)
        except LeaseLostError:
            return await self.store.get_run(run.id)
        cancelled = RunError(code="cancelled", message="the run was cancelled before it started")
        await self._finish(a, RunStatus.CANCELLED, cancelled)
        return a.run

    # --- recovery ---------------------------------------------------------------------------

    async def recover(
        self, *, run_id: str | None = None, observer: RunObserver | None = None
    ) -> list[RecoveryReport]:
        """Take over runs whose lease expired (or the one named) and drive each on from its
        last persisted point (DESIGN §4):

        - a user message without a reply: the model is asked again;
        - calls without results: ``read_only`` ones are run again, ``idempotent`` ones again
          with the same idempotency key, ``side_effect`` ones that were recorded as started
          are settled as ``unknown`` and the run waits for resolution (one recorded only as
          requested never started, so it runs now);
        - everything settled: the loop goes on.

        Two processes recovering the same run: exactly one wins the lease.
        """
        self.model  # noqa: B018 - fails (ConfigError) before anything is claimed or written
        if run_id is not None:
            candidates = [await self.store.get_run(run_id)]
        else:
            candidates = await self.store.list_stale_runs(now=self.clock.now())
        reports: list[RecoveryReport] = []
        for run in candidates:
            if run.status is not RunStatus.RUNNING:
                reports.append(
                    RecoveryReport(run.id, "skipped", f"run is {run.status.value}, not running")
                )
                continue
            if run.model and run.model != self.model.name:
                reports.append(
                    RecoveryReport(
                        run.id,
                        "skipped",
                        f"run was started with model {run.model!r}; this process has "
                        f"{self.model.name!r}",
                    )
                )
                continue
            try:
                a = await self._take_over(run, observer=observer)
            except LeaseLostError as e:
                now_run = await self.store.get_run(run.id)
                detail = (
                    e.message
                    if now_run.status is RunStatus.RUNNING
                    else f"run is {now_run.status.value}, not running"
                )
                reports.append(RecoveryReport(run.id, "skipped", detail))
                continue
            result = await self._drive(a, pending=True)
            reports.append(
                RecoveryReport(run.id, "resumed", f"run is {result.run.status.value}", result)
            )
        return reports

    async def resolve(
        self, run_id: str, call_id: str, status: ToolStatus | str, note: str, *, by: str = "user"
    ) -> Run:
        """Record what a person verified about a call whose outcome was ``unknown``. The
        model sees it as the call's result; continue with :meth:`resume`."""
        status = ToolStatus(status)
        if status not in (ToolStatus.SUCCEEDED, ToolStatus.FAILED):
            raise ValidationError("a resolution is 'succeeded' or 'failed'")
        if not note.strip():
            raise ValidationError("a resolution needs a note saying what was verified")
        run = await self.store.get_run(run_id)
        if run.status is not RunStatus.AWAITING_RESOLUTION:
            raise RunStateError(
                f"run {run_id} is {run.status.value}; only a run awaiting resolution can be "
                "resolved",
                run_id=run_id,
                status=run.status.value,
            )
        records = {r.call_id: r for r in await self.store.get_executions(run_id)}
        record = records.get(call_id)
        if record is None or record.result_status is not ToolStatus.UNKNOWN:
            unknown = sorted(c for c, r in records.items() if r.result_status is ToolStatus.UNKNOWN)
            raise RunStateError(
                f"call {call_id!r} of run {run_id} has no unknown outcome to resolve; "
                f"unresolved calls: {', '.join(unknown) or 'none'}",
                run_id=run_id,
                call_id=call_id,
            )
        a = await self._take_over(run, observer=None)
        now = self.clock.now()
        text = f"{note.strip()} (outcome verified by {by})"
        message = ToolResultMessage(
            id=self.ids.new("msg"),
            tool_name=record.tool_name,
            result=ToolResult(call_id=call_id, status=status, content=text, reason=text),
            created_at=now,
            run_id=run_id,
            step=a.usage.steps,
        )
        settled = replace(
            record, state=ExecutionState.SETTLED, settled_at=now, result_status=status, note=text
        )
        released = replace(a.run, lease=None)
        await self._commit(a, (message,), run=released, executions=(settled,))
        return a.run

    async def resume(self, run_id: str, *, observer: RunObserver | None = None) -> RunResult:
        """Continue a run that waited for resolution, once every unknown call is resolved."""
        self.model  # noqa: B018 - fails (ConfigError) before anything is claimed or written
        run = await self.store.get_run(run_id)
        if run.status is not RunStatus.AWAITING_RESOLUTION:
            raise RunStateError(
                f"run {run_id} is {run.status.value}; only a run awaiting resolution can be "
                "resumed (use `plait runs recover` for an interrupted running run)",
                run_id=run_id,
                status=run.status.value,
            )
        unknown = [
            r.call_id
            for r in await self.store.get_executions(run_id)
            if r.result_status is ToolStatus.UNKNOWN
        ]
        if unknown:
            raise RunStateError(
                f"run {run_id} still has calls with unknown outcome: {', '.join(unknown)}; "
                "resolve them first",
                run_id=run_id,
                calls=unknown,
            )
        a = await self._take_over(run, observer=observer, status=RunStatus.RUNNING)
        # Persist "running" before any work, so a crash from here on leaves a run that
        # recovery picks up (it skips runs that await resolution).
        await self._commit(a, (), run=a.run)
        return await self._drive(a, pending=True)

    # --- helpers ----------------------------------------------------------------------------

    def _activate(
        self,
        run: Run,
        session: Session,
        version: int,
        history: list[Message],
        observer: RunObserver | None,
    ) -> ActiveRun:
        deadline_s = run.budget.deadline_seconds
        return ActiveRun(
            run=run,
            usage=UsageCounters.of(run.usage),
            session=session,
            version=version,
            history=history,
            used_call_ids=call_ids(history),
            deadline=None if deadline_s is None else self.clock.monotonic() + deadline_s,
            observer=observer,
            task=asyncio.current_task(),
            cancel_requested=run.cancel_requested,
        )

    async def _take_over(
        self, run: Run, *, observer: RunObserver | None, status: RunStatus | None = None
    ) -> ActiveRun:
        """Claim a run's lease and rebuild its in-process state from the store. A resumed
        run's deadline window starts anew; its step and model-call usage carry on."""
        now = self.clock.now()
        claimed = await self.store.claim_run(
            run.id, owner=self.owner, now=now, expires_at=now + self.lease_seconds
        )
        if status is not None and claimed.status is not status:
            claimed = replace(claimed, status=status, error=None)
        session = await self.store.get_session(claimed.session_id)
        stored = await self.store.read_messages(claimed.session_id)
        history = [s.message for s in stored]
        return self._activate(claimed, session, session.version, history, observer)

    async def _drive(self, a: ActiveRun, *, pending: bool) -> RunResult:
        self._active[a.run.id] = a
        heartbeat = asyncio.create_task(self._heartbeat(a))
        try:
            await self._loop(a, pending=pending)
        finally:
            heartbeat.cancel()
            self._active.pop(a.run.id, None)
        self._emit(a, RunEnded(a.run))
        if a.external_cancel:
            raise asyncio.CancelledError
        return RunResult(a.run, tuple(a.added))

    async def _heartbeat(self, a: ActiveRun) -> None:
        """Renew the lease while the run works, so a long model or tool call does not let
        a recovering process take it over."""
        period = self.lease_seconds / 3
        while True:
            await asyncio.sleep(period)
            try:
                await self.store.renew_lease(
                    a.run.id, owner=self.owner, expires_at=self.clock.now() + self.lease_seconds
                )
            except LeaseLostError:
                a.lease_lost = True
                if a.task is not None and a.interruptible:
                    a.task.cancel()
                return
