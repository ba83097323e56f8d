"""AgentService: sessions, runs, and recovery — the application's public API.

The loop itself is :class:`~plait.application.driver.RunDriver` (the persistence order of
docs/design.md#persist-before-acting is documented there) over the stages ContextBuilder,
ModelCaller, ToolGate and ToolRunner. Every save is a restart point
(docs/design.md#recovery-without-repeating-side-effects): :meth:`AgentService.recover` finds runs
whose lease expired and continues each from its last persisted point.

Waiting for a person is one mechanism (:data:`~plait.application.driver.WAITING`): a run
``awaiting_resolution`` (an unknown side effect) or ``awaiting_approval`` (a gated call)
holds no lease and keeps its session; :meth:`cancel` ends either, :meth:`recover` leaves
both alone, :meth:`resume` continues either once nothing blocks it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from dataclasses import field, replace
from pathlib import Path

from plait.application._history import session_history
from plait.application._journal import RunJournal
from plait.application._models import ModelFactory, RunModels
from plait.application._queued import begin_claimed, can_queue, check_can_queue, queued
from plait.application._recovery import Recoverer, RecoveryReport
from plait.application._run_state import RunResult, idempotency_key
from plait.application._waiting import resolution, resumable, unknown_call
from plait.application.answers import OutputType, final_output, output_schema_of
from plait.application.capabilities import RunModelsNeeded, check_run_capabilities
from plait.application.claiming import ClaimedRun
from plait.application.compaction import CompactionService
from plait.application.compaction.stage import CompactionStage
from plait.application.context_builder import ContextBuilder
from plait.application.driver import WAITING, RunDriver
from plait.application.events import MessageSaved, RunEnded, RunObserver, RunStarted
from plait.application.gate import AllowAll, ToolGate, policy_of, reviewer_model_of, reviewer_of
from plait.application.governance.approvals import Approvals
from plait.application.model_caller import (
    ModelCaller,
    OverflowHook,
    RetryPolicy,
    no_overflow,
)
from plait.application.ports import (
    ArtifactStore,
    Clock,
    Commit,
    IdGenerator,
    LeftoverSweeper,
    ModelClient,
    RunTelemetry,
    SessionStore,
    TextSink,
    TokenMeter,
    Tool,
)
from plait.application.service_config import DEFAULT_INSTRUCTIONS, check_config
from plait.application.tool_runner import ToolRunner
from plait.application.toolset import ToolSet
from plait.domain.errors import (
    ConfigError,
    LeaseLostError,
    PlaitError,
    ValidationError,
)
from plait.domain.messages import (
    ToolStatus,
    UserMessage,
)
from plait.domain.record import record
from plait.domain.runs import Budget, Lease, Run, RunError, RunStatus
from plait.domain.session import Session, StoredMessage
from plait.domain.subagents import ParentCall
from plait.domain.text import id_problem, text_problem

__all__ = [
    "DEFAULT_INSTRUCTIONS",
    "AgentService",
    "ModelFactory",
    "RecoveryReport",
    "RunDefaults",
    "RunResult",
    "idempotency_key",
]


@record(kw_only=True)
class RunDefaults:
    """What a service's runs get unless a call says otherwise."""

    instructions: str = DEFAULT_INSTRUCTIONS
    budget: Budget = field(default_factory=Budget)
    lease_seconds: float = 60.0


class AgentService:
    """The application's public API over the loop's stages. Build it with
    :class:`plait.runtime.Runtime`, with :meth:`build` from its parts, or directly from
    collaborators already built:

    - ``driver`` (:class:`RunDriver`): the loop over the stages (docs/architecture.md): the
      ``context`` (:class:`ContextBuilder`), the ``caller`` (:class:`ModelCaller`), the
      ``gate`` (:class:`ToolGate`), the ``runner`` (:class:`ToolRunner`), over the
      :class:`RunJournal` that persists the runs;
    - ``models`` (:class:`RunModels`): which model a run taken over continues with;
    - ``compaction`` (:class:`CompactionService`): summaries, constraints and recall in
      the assistant's context (docs/design.md#compaction); ``None``: whole history;
    - ``sweeper``: what recovery clears of an interrupted write;
    - ``defaults`` (:class:`RunDefaults`): instructions, budget and lease of runs.
    """

    def __init__(
        self,
        *,
        store: SessionStore,
        artifacts: ArtifactStore,
        clock: Clock,
        ids: IdGenerator,
        driver: RunDriver,
        models: RunModels,
        defaults: RunDefaults,
        compaction: CompactionService | None = None,
        sweeper: LeftoverSweeper | None = None,
    ) -> None:
        check_config(list(driver.tools.values()), defaults.lease_seconds)
        self.store = store
        self.artifacts = artifacts
        self.clock = clock
        self.ids = ids
        self.instructions = defaults.instructions
        self.budget = defaults.budget
        self.lease_seconds = defaults.lease_seconds
        self.driver = driver
        self.journal = driver.journal
        self.caller = driver.caller
        self._gate = driver.gate
        self._compaction = compaction
        self._active = self.driver.active
        self.sweeper = sweeper
        self.subagents: dict[str, AgentService] = {}
        """The services of this agent's sub-agents, by name (the composition root fills
        it): a child run is continued by its own agent's service (its instructions,
        tools and model), whoever is asked to continue it."""
        self.approvals = Approvals(store, clock)
        """A person's answers to calls that wait (approve, deny)."""
        self.models = models
        """Which model a run taken over continues with (its recorded spec)."""

    @classmethod
    def build(
        cls,
        *,
        store: SessionStore,
        artifacts: ArtifactStore,
        model: ModelClient | None,
        tools: Sequence[Tool] | ToolSet = (),
        clock: Clock,
        ids: IdGenerator,
        instructions: str = DEFAULT_INSTRUCTIONS,
        budget: Budget | None = None,
        owner: str | None = None,
        lease_seconds: float = 60.0,
        checkpoint: Callable[[str], None] | None = None,
        context: ContextBuilder | None = None,
        meter: TokenMeter | None = None,
        caller: ModelCaller | None = None,
        retry: RetryPolicy | None = None,
        on_overflow: OverflowHook | None = None,
        gate: ToolGate | None = None,
        runner: ToolRunner | None = None,
        compaction: CompactionService | None = None,
        model_spec: str | None = None,
        model_factory: ModelFactory | None = None,
        sweeper: LeftoverSweeper | None = None,
        telemetry: RunTelemetry | None = None,
    ) -> AgentService:
        """A service from its parts, each stage defaulted when not given: the context
        from ``instructions``, ``tools`` and ``meter``; the caller from ``model``,
        ``retry`` and ``on_overflow``; the gate allows everything; the runner spools to
        ``artifacts``. ``tools`` as a :class:`~plait.application.toolset.ToolSet` can
        change between steps; ``telemetry``: traces and metrics of the runs (``None``:
        off). ``checkpoint`` is a test-only hook called with the name of each persistence
        point (``user_saved``, ``assistant_saved``, ``execution_started``,
        ``tool_returned``, ``result_saved``) right after it is reached; crash tests kill
        the process there."""
        toolset = tools if isinstance(tools, ToolSet) else None
        tools = list(tools.tools.values()) if isinstance(tools, ToolSet) else tools
        check_config(tools, lease_seconds)
        caller = caller or ModelCaller(
            model, clock=clock, policy=retry, on_overflow=on_overflow or no_overflow
        )
        gate = gate or AllowAll()
        if (own_reviewer := reviewer_model_of(gate)) is not None:
            caller.role_models["reviewer"] = own_reviewer  # its own model, same budget
        journal = RunJournal(
            store=store,
            clock=clock,
            ids=ids,
            owner=owner or ids.new("worker"),
            checkpoint=checkpoint,
            telemetry=telemetry,
        )
        specs = tuple(tool.spec for tool in tools)
        driver = RunDriver(
            store=store,
            journal=journal,
            context=context or ContextBuilder(instructions=instructions, tools=specs, meter=meter),
            caller=caller,
            gate=gate,
            runner=runner or ToolRunner(artifacts),
            tools={tool.spec.name: tool for tool in tools},
            lease_seconds=lease_seconds,
            toolset=toolset,
            compaction=None
            if compaction is None
            else CompactionStage(
                compaction, instructions=instructions, tools=specs, emit=journal.emit
            ),
        )
        return cls(
            store=store,
            artifacts=artifacts,
            clock=clock,
            ids=ids,
            driver=driver,
            models=RunModels(caller, model_spec, model_factory),
            defaults=RunDefaults(
                instructions=instructions, budget=budget or Budget(), lease_seconds=lease_seconds
            ),
            compaction=compaction,
            sweeper=sweeper,
        )

    @property
    def owner(self) -> str:
        """Lease owner name of this service's runs (one per process by default)."""
        return self.journal.owner

    @owner.setter
    def owner(self, value: str) -> None:
        self.journal.owner = value

    @property
    def model(self) -> ModelClient:
        """The model runs use; a service opened without one can still read, cancel and
        resolve, but not run (ConfigError naming the fix)."""
        return self.caller.model

    def _check_fits(self, text: str) -> None:
        """Refuse, before anything is written, a message that alone is larger than the
        model's context window (no compaction can make room for it)."""
        window = self.model.capabilities.context_window
        size = len(text.encode("utf-8", "surrogatepass"))
        if window is None or size <= window:  # a token is at least one byte
            return
        meter = self.driver.context.meter
        if self._compaction is not None:  # the meter the run's context is budgeted with
            with contextlib.suppress(PlaitError):  # none configured: the context's estimate
                meter = self._compaction.profiles.get(self.model.name).meter
        tokens = meter.count_text(text)
        if tokens > window:
            raise ValidationError(
                f"the message ({size} bytes, about {tokens} tokens) cannot fit model "
                f"{self.model.name!r}'s context window of {window} tokens; send a shorter "
                "message, or put the text in a workspace file the agent can read in parts",
                bytes=size,
                tokens=tokens,
                context_window=window,
            )

    # --- sessions ---------------------------------------------------------------------------

    async def create_session(
        self,
        *,
        workspace: str | None = None,
        owner: str | None = None,
        title: str | None = None,
        model: str | None = None,
    ) -> Session:
        """A new session. ``workspace`` must be an existing directory (kept as an absolute
        path); ``model``: the spec its runs use when they name none (else its first run's)."""
        _check_text("the session title", title)
        _check_text("the session model", model)
        session = Session(
            id=self.ids.new("ses"),
            created_at=self.clock.now(),
            owner=owner,
            workspace=None if workspace is None else existing_directory(workspace),
            title=title,
            model=model or None,
        )
        await self.store.create_session(session)
        return session

    async def history(self, session_id: str) -> list[StoredMessage]:
        await self.store.get_session(session_id)  # unknown id -> SessionNotFoundError
        return await self.store.read_messages(session_id)

    async def get_run(self, run_id: str) -> Run:
        return await self.store.get_run(run_id)

    # --- running ----------------------------------------------------------------------------

    def check_can_run(self, budget: Budget | None = None, model: ModelClient | None = None) -> None:
        """Raise the ConfigError :meth:`send` would raise before writing anything: no model,
        or a capability or setting a model of the run cannot honour (tool calling, the
        reviewer's and summarizer's structured output, prices for a cost ceiling; see
        :mod:`plait.application.capabilities`), and (automatic compaction on) a model
        without a configured meter and context window
        (:class:`~plait.domain.errors.TokenMeterModelUnconfiguredError`)."""
        budget, model = budget or self.budget, model or self.model
        reviewer = reviewer_of(self._gate, model)
        compaction = self._compaction
        automatic = (
            compaction is not None
            and compaction.settings.auto
            and model.capabilities.context_window is not None
        )
        summarizer = (compaction.summarizer or model) if automatic and compaction else None
        needed = RunModelsNeeded(
            assistant=model,
            tools=len(self.driver.tools),
            reviewer=None if reviewer is None else reviewer[0],
            reviewer_max_output_tokens=None if reviewer is None else reviewer[1],
            summarizer=summarizer,
            max_cost_usd=budget.max_cost_usd,
            spec=self.models.spec,
        )
        check_run_capabilities(needed)
        self.driver.compaction.check_model(model.name)

    async def send(
        self,
        session_id: str,
        text: str,
        *,
        budget: Budget | None = None,
        observer: RunObserver | None = None,
        on_text: TextSink | None = None,
        output_type: OutputType | None = None,
        run_id: str | None = None,
        parent: ParentCall | None = None,
        mcp_servers: Sequence[str] | None = None,
    ) -> RunResult:
        """Append a user message and run the loop until the run ends or waits.
        ``on_text`` receives the assistant's text as it streams (models that stream).
        ``output_type`` (a JSON Schema dict, an OutputSchema or a pydantic model class):
        the final answer must match it (a typed answer); its validated value is the final
        message's ``output`` and the result's ``output`` (a model instance for a class).
        ``run_id`` and ``parent``: a sub-agent's run (its id derived from the parent's
        call, see :mod:`plait.application.subagents`). ``mcp_servers``: the MCP servers
        (configured names) whose tools the run is offered, recorded with it (``None``:
        all; an unknown name is a ValidationError before anything is written).

        Raises :class:`~plait.domain.errors.SessionBusyError` if the session already has an
        active run (here or in another process); nothing is written then.
        """
        if not isinstance(text, str) or not text.strip():
            raise ValidationError("the message text is empty")
        _check_text("the message text", text)
        budget = budget or self.budget
        output_schema = output_schema_of(output_type)
        servers = self.check_mcp_servers(mcp_servers)
        self.check_can_run(budget)
        self._check_fits(text)
        session, history = await session_history(self.store, session_id)
        now = self.clock.now()
        run_id = run_id or self.ids.new("run")
        run = Run(
            id=run_id,
            session_id=session_id,
            status=RunStatus.RUNNING,
            budget=budget,
            started_at=now,
            model=self.model.name,
            model_spec=self.models.spec,
            lease=Lease(owner=self.owner, expires_at=now + self.lease_seconds),
            deadline_at=None if budget.deadline_seconds is None else now + budget.deadline_seconds,
            policy=policy_of(self.driver.gate),
            output_schema=output_schema,
            parent=parent,
            mcp_servers=servers,
        )
        if self.journal.telemetry is not None:  # the run's trace, stored with it
            run = replace(run, trace_context=self.journal.telemetry.begin(run, "started"))
        user = UserMessage(id=self.ids.new("msg"), text=text, created_at=now, run_id=run_id)
        commit = Commit(
            session_id=session_id,
            expected_version=session.version,
            messages=(user,),
            run=run,
            lease_owner=self.owner,
        )
        try:
            result = await self.store.start_run(commit)
        except BaseException as error:
            if self.journal.telemetry is not None:
                self.journal.telemetry.end(run, error)
            raise
        history.append(user)
        active = self.driver.activate(run, session, result.version, history, observer, on_text)
        active.added.append(StoredMessage(result.version, user))
        if self.journal.listened(active):
            self.journal.emit(active, RunStarted(run))
            self.journal.emit(active, MessageSaved(run_id, active.added[-1]))
        self.journal.hit("user_saved")
        return final_output(await self.driver.drive(active, pending=False), output_type)

    # --- service mode: queued runs (a worker drives them) ---------------------------------

    def check_mcp_servers(self, names: Sequence[str] | None) -> tuple[str, ...] | None:
        """``names`` as a run records them; a ValidationError naming an MCP server this
        service does not have."""
        if names is None:
            return None
        if isinstance(names, str):
            raise ValidationError("mcp_servers must be a list of server names")
        chosen = tuple(dict.fromkeys(names))
        toolset = self.driver.toolset
        known = toolset.groups() if toolset is not None else ()
        unknown = [n for n in chosen if n not in known]
        if unknown:
            have = ", ".join(repr(k) for k in known) or "none"
            raise ValidationError(
                f"unknown MCP server {unknown[0]!r} (configured: {have})", server=unknown[0]
            )
        return chosen

    async def submit(
        self,
        session_id: str,
        text: str,
        *,
        budget: Budget | None = None,
        owner: str | None = None,
        output_type: OutputType | None = None,
        mcp_servers: Sequence[str] | None = None,
    ) -> Run:
        """Store a user message and a ``queued`` run for it in one commit (one store
        call, no read first) and return at once; a worker
        (:class:`plait.application.worker.Worker`) runs it. Raises
        :class:`~plait.domain.errors.SessionBusyError` like :meth:`send`. ``owner``: the
        session must be this owner's, else
        :class:`~plait.domain.errors.SessionNotFoundError` as if it did not exist
        (``None``: anyone's, e.g. an admin)."""
        if not isinstance(text, str) or not text.strip():
            raise ValidationError("the message text is empty")
        _check_text("the message text", text)
        budget = budget or self.budget
        servers = self.check_mcp_servers(mcp_servers)
        if self.caller.has_model:  # else the worker checks it against its model
            self.check_can_run(budget)
        now = self.clock.now()
        output_schema = output_schema_of(output_type)
        run, commit = queued(
            session_id,
            text,
            budget,
            self.ids,
            now,
            owner=owner,
            output_schema=output_schema,
            mcp_servers=servers,
        )
        telemetry = self.journal.telemetry
        if telemetry is None:
            await self.store.start_run(commit)
            return run
        # The run's trace begins here (a short span: queued); the worker continues it.
        context = telemetry.begin(run, "queued")
        run = replace(run, trace_context=context)
        commit = replace(commit, run=run)
        try:
            await self.store.start_run(commit)
        except BaseException as error:
            telemetry.end(run, error)
            raise
        telemetry.end(run)
        return run

    async def execute(
        self,
        run: Run | ClaimedRun,
        *,
        observer: RunObserver | None = None,
        on_text: TextSink | None = None,
    ) -> RunResult:
        """Drive a queued run this process claimed (its lease owner is :attr:`owner`)
        from its user message on, as recovery would; a :class:`ClaimedRun` was already
        persisted as ``running`` by its claim."""
        model = self.model
        active = await begin_claimed(
            self.driver,
            self.journal,
            self.clock,
            run,
            model=(model.name, self.models.spec),
            observer=observer,
            on_text=on_text,
        )
        self.journal.emit(active, RunStarted(active.run))
        try:  # the API process may have had no model (or another one) to check it with
            self.check_can_run(active.run.budget, model)
        except ConfigError as refused:
            telemetry = self.journal.telemetry
            if telemetry is not None:  # its segment: the claim, then the failure
                context = telemetry.begin(active.run, "claimed")
                if context is not None:  # stored with the failure's write
                    active.run = replace(active.run, trace_context=context)
            try:
                error = RunError(code=refused.code, message=refused.message)
                await self.journal.finish(active, RunStatus.FAILED, error)
            except BaseException as failed:
                if telemetry is not None:
                    telemetry.end(active.run, failed)
                raise
            self.journal.emit(active, RunEnded(active.run))
            if telemetry is not None:
                telemetry.end(active.run)
            return RunResult(active.run, tuple(active.added))
        return await self.driver.drive(active, pending=True, how="claimed")

    async def cancel(self, run_id: str, *, force: bool = False) -> Run:
        """Ask a run to stop. A run driven by this process stops at once (a running
        stoppable call is interrupted); a run in another process sees the request at its
        next commit. A run waiting for a person (resolution or approval) is ended here:
        its pending calls get ``cancelled`` results and an unresolved one an ``unknown``
        result. ``force``: a running run whose process is known to be gone is taken over
        before its lease expires and ended here the same way, except that a call that had
        started and may have acted (not read-only) is settled ``unknown``: the run then
        awaits resolution, and ends ``cancelled`` once a person resolved it and it is
        resumed (no effect is hidden: docs/design.md#recovery-without-repeating-side-effects).
        The runs of sub-agents it delegated to are cancelled with it (those it drives stop
        with its task)."""
        run = await self._cancel_one(run_id, force=force)
        if self.subagents:
            for child in await self.store.list_runs():
                link = child.parent
                if link is not None and link.run_id == run_id and not child.status.terminal:
                    service = self.subagents.get(link.agent, self)
                    await service.cancel(child.id, force=force)
        return run

    async def _cancel_one(self, run_id: str, *, force: bool) -> Run:
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
        if run.status not in WAITING and not (force and run.status is RunStatus.RUNNING):
            return run
        waited = run.status.value.replace("_", " ")
        taken = await self.driver.take_over(run, observer=None, force=force)
        if run.status is RunStatus.RUNNING and await self.driver.hold_cut_short(
            taken, why="the run was cancelled"
        ):
            return taken.run  # awaiting resolution: the cancel ends it once a person resolved
        await self.driver.close_pending(taken, why=f"the run was cancelled while {waited}")
        cancelled = RunError(code="cancelled", message="the run was cancelled")
        await self.journal.finish(taken, RunStatus.CANCELLED, cancelled)
        return taken.run

    def lease_token(self, run_id: str) -> int | None:
        """The lease token this process drives ``run_id`` under (``None``: it does not
        drive it): the run's other writes (its events) carry it, so a process that lost
        the run writes none of them either."""
        active = self._active.get(run_id)
        return None if active is None else active.run.lease_token

    def abandon(self, run_id: str) -> bool:
        """Stop driving a run this process drives *without writing anything more* (a
        worker shutting down): the run stays ``running`` for another process to recover.
        Returns False if this process does not drive it."""
        active = self._active.get(run_id)
        if active is None:
            return False
        active.lease_lost = True  # every further commit stops before writing
        if active.task is not None:
            active.task.cancel()
        return True

    async def _cancel_queued(self, run: Run) -> Run:
        """End a queued run no worker holds; one a worker claimed sees the request."""
        try:
            active = await self.driver.take_over(run, observer=None)
        except LeaseLostError:
            return await self.store.get_run(run.id)
        cancelled = RunError(code="cancelled", message="the run was cancelled before it started")
        await self.journal.finish(active, RunStatus.CANCELLED, cancelled)
        return active.run

    # --- recovery ---------------------------------------------------------------------------

    async def recover(
        self,
        *,
        run_id: str | None = None,
        observer: RunObserver | None = None,
        on_text: TextSink | None = None,
        force: bool = False,
    ) -> list[RecoveryReport]:
        """Take over runs whose lease expired (or the one named) and drive each on from its
        last persisted point (docs/design.md#recovery-without-repeating-side-effects):

        - a user message without a reply: the model is asked again;
        - calls without results: ``read_only`` ones are run again, ``idempotent`` ones again
          with the same idempotency key, ``side_effect`` ones that were recorded as started
          are settled as ``unknown`` and the run waits for resolution (one recorded only as
          requested never started, so it runs now);
        - everything settled: the loop goes on.

        Two processes recovering the same run: exactly one wins the lease. ``force`` (only
        with ``run_id``) takes the run over before its lease expires, for an operator who
        knows its process is gone.
        """
        if force and run_id is None:
            raise ConfigError("a forced recovery names its run: pass run_id (--run RUN)")
        if run_id is not None and (child := await self._child_service(run_id)) is not None:
            return await child.recover(
                run_id=run_id, observer=observer, on_text=on_text, force=force
            )
        self.models.check_can_run()
        if run_id is not None:
            candidates = [await self.store.get_run(run_id)]
        else:
            candidates = await self.store.list_stale_runs(now=self.clock.now())
        recoverer = Recoverer(
            store=self.store,
            driver=self.driver,
            models=self.models,
            clock=self.clock,
            sweeper=self.sweeper,
        )
        reports: list[RecoveryReport] = []
        for run in candidates:
            if run.parent is not None and run_id is None:
                detail = f"a sub-agent's run: run {run.parent.run_id} continues it"
                reports.append(RecoveryReport(run.id, "skipped", detail))
                continue
            reports.append(
                await recoverer.recover(run, observer=observer, on_text=on_text, force=force)
            )
        return reports

    async def resolve(
        self,
        run_id: str,
        call_id: str,
        status: ToolStatus | str,
        note: str,
        *,
        by: str = "user",
        queue: bool = False,
    ) -> Run:
        """Record what a person verified about a call whose outcome was ``unknown``. The
        model sees it as the call's result; continue with :meth:`resume`. ``queue``
        (service mode): once no call of the run is left unknown, the same commit puts the
        run back in the queue and a worker continues it."""
        status = ToolStatus(status)
        if status not in (ToolStatus.SUCCEEDED, ToolStatus.FAILED):
            raise ValidationError("a resolution is 'succeeded' or 'failed'")
        if queue:
            check_can_queue(self.store, "cannot queue the run after its resolution")
        if not note.strip():
            raise ValidationError("a resolution needs a note saying what was verified")
        _check_text("the resolution note", note)
        if (problem := id_problem(call_id)) is not None:
            raise ValidationError(
                f"the call id {call_id[:60]!a} {problem}", call_id=ascii(call_id[:60])
            )
        run, record, others = await unknown_call(self.store, run_id, call_id)
        active = await self.driver.take_over(run, observer=None)
        text = f"{note.strip()} (outcome verified by {by})"
        message, settled = resolution(
            record,
            status,
            text,
            message_id=self.ids.new("msg"),
            now=self.clock.now(),
            step=active.usage.steps,
        )
        # The call did run (in the process that died): it counts as one of the run's calls.
        usage = replace(active.run.usage, tool_calls=active.run.usage.tool_calls + 1)
        released = replace(active.run, lease=None, usage=usage)
        if queue and not others:
            released = replace(released, status=RunStatus.QUEUED, error=None)
        await self.journal.commit(active, (message,), run=released, executions=(settled,))
        return active.run

    async def requeue(self, run_id: str) -> Run:
        """Put a run that waits for a person back in the queue for a worker, once nothing
        blocks it any more (every unknown call resolved; for one awaiting approval, the
        gate is asked again when a worker continues it): the service-mode
        :meth:`resume`, e.g. for a run left waiting after its resolution. A run already
        queued is returned as it is. RunStateError for any other run (running, ended, or
        with unknown calls left); a run another process holds keeps going
        (LeaseLostError). Refused (ConfigError) on a store no worker can serve."""
        check_can_queue(self.store, "cannot queue the run")
        current = await self.store.get_run(run_id)
        if current.status is RunStatus.QUEUED:
            return current
        run = await resumable(self.store, run_id)
        active = await self.driver.take_over(run, observer=None)
        queued_run = replace(active.run, status=RunStatus.QUEUED, error=None, lease=None)
        await self.journal.commit(active, (), run=queued_run)
        return active.run

    async def resume(
        self,
        run_id: str,
        *,
        observer: RunObserver | None = None,
        on_text: TextSink | None = None,
    ) -> RunResult:
        """Continue a run that waits for a person: one awaiting resolution once every
        unknown call is resolved; a queued one on a store no worker can serve (it starts
        here); one awaiting approval at once (the gate is asked again
        about the waiting call, and lets it run if an approval now allows it)."""
        child = await self._child_service(run_id)
        if child is not None:
            return await self._resume_child(child, run_id, observer, on_text)
        self.models.check_can_run()
        run = await resumable(self.store, run_id, queued=not can_queue(self.store))
        caller = self.models.caller_for(run)
        active = await self.driver.take_over(
            run, observer=observer, status=RunStatus.RUNNING, on_text=on_text, caller=caller
        )
        # A person took their time: the deadline window starts anew (recovery, by
        # contrast, keeps the run's absolute deadline). Persist "running" before any work,
        # so a crash from here on leaves a run that recovery picks up.
        window = active.run.budget.deadline_seconds
        if window is not None:
            active.run = replace(active.run, deadline_at=self.clock.now() + window)
            active.deadline = self.clock.monotonic() + window
        await self.journal.commit(active, (), run=active.run)
        return await self.driver.drive(active, pending=True, how="resumed")

    async def _child_service(self, run_id: str) -> AgentService | None:
        """The service of the sub-agent whose run ``run_id`` is (None: not a child run
        of this agent's)."""
        if not self.subagents:
            return None
        run = await self.store.get_run(run_id)
        return None if run.parent is None else self.subagents.get(run.parent.agent)

    async def _resume_child(
        self,
        child: AgentService,
        run_id: str,
        observer: RunObserver | None,
        on_text: TextSink | None,
    ) -> RunResult:
        """Continue a child run with its agent's service; once it has ended, a parent
        that waited for it goes on too (its call is executed again and finds the answer)."""
        result = await child.resume(run_id, observer=observer, on_text=on_text)
        parent = result.run.parent
        if parent is not None and result.run.status.terminal:
            waiting = await self.store.get_run(parent.run_id)
            if waiting.status is RunStatus.AWAITING_APPROVAL:
                await self.resume(parent.run_id, observer=observer, on_text=on_text)
        return result


def existing_directory(workspace: str) -> str:
    """``workspace`` as an absolute path, or ConfigError when it is no existing directory
    (a session over a missing one would fail every tool call)."""
    path = Path(workspace).expanduser()
    if not path.is_dir():
        raise ConfigError(
            f"workspace {workspace!r} is not an existing directory", workspace=workspace
        )
    return str(path.resolve())


def _check_text(what: str, text: str | None) -> None:
    """Refuse text no store can keep (a NUL, a lone surrogate) before anything is written."""
    if text is not None and (problem := text_problem(text)) is not None:
        raise ValidationError(f"{what} {problem}")
