"""Composition root: the only module that picks concrete adapters.

``Runtime`` takes every port as a keyword argument (tests pass fakes); ``Runtime.open``
builds the real ones from a store URL and a model spec.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from plait.application.context_builder import ContextBuilder
from plait.application.gate import AllowAll, ToolGate
from plait.application.model_caller import ModelCaller, OverflowHook, RetryPolicy, no_overflow
from plait.application.queries import Queries
from plait.application.service import DEFAULT_INSTRUCTIONS, AgentService
from plait.application.subagents import Delegation
from plait.application.tool_runner import ToolRunner
from plait.application.toolset import ToolSet
from plait.domain.errors import ConfigError
from plait.domain.runs import Budget

if TYPE_CHECKING:
    from collections.abc import Callable

    from plait.adapters.mcp import McpManager, McpServerConfig, McpToolInfo
    from plait.adapters.stores.shared.offload import IoMode
    from plait.adapters.tools import SandboxSettings
    from plait.application.approvals import ApprovalDesk
    from plait.application.compaction import CompactionService
    from plait.application.fork import ForkService
    from plait.application.ports import (
        ApprovalStore,
        ArtifactStore,
        Clock,
        IdGenerator,
        LeftoverSweeper,
        ModelClient,
        RunTelemetry,
        SessionStore,
        TokenMeter,
        Tool,
        WorkspaceSnapshots,
    )
    from plait.application.retention import RetentionService
    from plait.application.toolset import ToolSource
    from plait.application.webhooks import WebhookService
    from plait.domain.compaction import CompactionSettings
    from plait.domain.policy import Policy
    from plait.domain.retention import RetentionSettings
    from plait.domain.subagents import SubAgent
    from plait.domain.tools import ToolSpec

__all__ = [
    "Runtime",
    "configured_mcp",
    "configured_retention",
    "configured_sandbox",
    "configured_subagents",
    "configured_telemetry",
    "data_dir",
    "default_db_url",
    "governed_gate",
    "offered_tools",
    "open_model",
]


def data_dir() -> Path:
    """Where plait keeps its data by default: ``$XDG_DATA_HOME/plait``, else
    ``~/.local/share/plait`` (outside any project, so out of the agent's reach)."""
    base = os.environ.get("XDG_DATA_HOME") or ""
    root = Path(base) if os.path.isabs(base) else Path.home() / ".local" / "share"
    return root / "plait"


def default_db_url() -> str:
    """``PLAIT_DB`` if set, else ``plait.db`` in :func:`data_dir`."""
    return os.environ.get("PLAIT_DB") or f"sqlite:///{data_dir() / 'plait.db'}"


def open_model(spec: str, *, tools: Sequence[ToolSpec] = ()) -> ModelClient:
    """A model client for ``spec`` (``openai:gpt-4o``, ``scripted:demo.yaml``, a name from
    plait.toml, ...; see :mod:`plait.adapters.models`). Imports no provider SDK."""
    from plait.adapters.models import open_model as open_spec

    return open_spec(spec, tools=tools)


def _compaction(
    store: object,
    model: ModelClient | None,
    clock: Clock,
    ids: IdGenerator,
    settings: CompactionSettings | None,
    meter_for: Callable[[ModelClient], TokenMeter] | None,
) -> CompactionService | None:
    from plait.application.compaction import CompactionService, ModelProfiles
    from plait.application.compaction.estimate import EstimateMeter

    if not hasattr(store, "activate_summary"):
        return None

    def estimate(client: ModelClient) -> TokenMeter:
        return EstimateMeter()

    summarizer = model  # the RFC's default: the run's model (see summarizer_for)
    spec = settings.summarizer_model if settings is not None and model is not None else None
    if spec:
        summarizer = open_model(spec)
    clients = [c for c in (model, summarizer) if c is not None]
    profiles = ModelProfiles.of_clients(clients, meter_for or estimate)
    return CompactionService(
        store=store,  # type: ignore[arg-type]
        profiles=profiles,
        summarizer=summarizer,
        clock=clock,
        ids=ids,
        settings=settings,
        summarizer_follows_run=not spec,
    )


def _with_recall(
    tools: Sequence[Tool], store: object, compacting: bool, model: ModelClient | None
) -> Sequence[Tool]:
    """With compaction on, the model also gets the built-in read-only ``recall`` tool
    (the originals a summary left out), unless a tool of that name is already there. A
    runtime with neither tools nor a model (``store_only``) runs nothing: no recall."""
    if not compacting or not hasattr(store, "search_history"):
        return tools
    if not tools and model is None:
        return tools
    if any(t.spec.name == "recall" for t in tools):
        return tools
    from plait.application.compaction import recall_tool

    return [*tools, recall_tool(store)]


def _stages(
    tools: Sequence[Tool],
    instructions: str,
    model: ModelClient | None,
    clock: Clock,
    artifacts: ArtifactStore,
    meter: TokenMeter | None,
    retry: RetryPolicy | None,
    on_overflow: OverflowHook | None,
) -> dict[str, Any]:
    """The loop's stages other than the gate (DESIGN §1), and the recovery sweeper of
    interrupted writes, as AgentService keywords."""
    return {
        "context": ContextBuilder(
            instructions=instructions, tools=tuple(t.spec for t in tools), meter=meter
        ),
        "caller": ModelCaller(
            model, clock=clock, policy=retry, on_overflow=on_overflow or no_overflow
        ),
        "runner": ToolRunner(artifacts),
        "sweeper": _sweeper(),
    }


def _child_service(
    agent: SubAgent,
    tools: Sequence[Tool],
    *,
    store: SessionStore,
    artifacts: ArtifactStore,
    model: ModelClient | None,
    clock: Clock,
    ids: IdGenerator,
    budget: Budget | None,
    owner: str | None,
    lease_seconds: float,
    gate: ToolGate | None,
    retry: RetryPolicy | None,
    model_spec: str | None,
    telemetry: RunTelemetry | None,
) -> AgentService:
    """The service that drives ``agent``'s runs: its instructions, model and tools, the
    parent's store, gate (so its approvals reach the same inbox), owner and telemetry (its
    runs are traced in the parent's trace)."""
    by_name = {t.spec.name: t for t in tools}
    names = agent.tools if agent.tools is not None else tuple(by_name)
    unknown = [n for n in names if n not in by_name]
    if unknown:
        raise ConfigError(
            f"sub-agent {agent.name!r} names tools the agent does not have: "
            f"{', '.join(unknown)} (available: {', '.join(sorted(by_name)) or 'none'})",
            subagent=agent.name,
        )
    child_tools = [by_name[n] for n in names]
    child_model = model
    if agent.model is not None:
        child_model = open_model(agent.model, tools=[t.spec for t in child_tools])
    if agent.policy is not None:  # its own rules; approvals in the same store (one inbox)
        if not hasattr(store, "request_approval"):
            raise ConfigError(
                f"sub-agent {agent.name!r} has a policy, but this store keeps no approvals",
                subagent=agent.name,
            )
        gate = governed_gate(agent.policy, cast("ApprovalStore", store), clock, ids, child_model)
    stages = _stages(
        child_tools, agent.instructions, child_model, clock, artifacts, None, retry, None
    )
    return AgentService(
        store=store,
        artifacts=artifacts,
        model=child_model,
        tools=child_tools,
        clock=clock,
        ids=ids,
        instructions=agent.instructions,
        budget=budget,
        owner=owner,
        lease_seconds=lease_seconds,
        **stages,
        gate=gate or AllowAll(),
        model_spec=agent.model or model_spec,
        model_factory=lambda spec: open_model(spec, tools=[t.spec for t in child_tools]),
        telemetry=telemetry,
    )


def _policy(policy: Policy | str | None) -> Policy:
    from plait.adapters.policy_file import policy_from
    from plait.domain.policy import Policy

    return policy if isinstance(policy, Policy) else policy_from(policy)


def governed_gate(
    policy: Policy | str | None,
    approvals: ApprovalStore,
    clock: Clock,
    ids: IdGenerator,
    model: ModelClient | None,
) -> ToolGate:
    """The policy → reviewer → approval gate (DESIGN §5) over ``approvals``; ``policy``
    is a Policy, a file path, or ``None`` for ``PLAIT_POLICY`` / the built-in default. A
    policy whose ``[reviewer] model`` names a model gets a reviewer with that model
    (opened here, so a bad spec or a missing key fails now); otherwise the reviewer uses
    the run's model."""
    from plait.adapters.tools.probe import FileProbe
    from plait.application.governance.gate import GovernedGate
    from plait.application.governance.governor import Governor
    from plait.application.governance.reviewer import Reviewer

    chosen = _policy(policy)
    own = _reviewer_model(chosen)
    named = own or model
    reviewer = Reviewer(config=chosen.reviewer, model=own, name=named.name if named else "reviewer")
    governor = Governor(
        policy=chosen,
        approvals=approvals,
        clock=clock,
        ids=ids,
        reviewer=reviewer,
        probe=FileProbe(),
    )
    return GovernedGate(governor)


def _reviewer_model(policy: Policy) -> ModelClient | None:
    """The reviewer's own model (``[reviewer] model``), opened with no tools: it only
    judges; a spec that cannot be opened is a ConfigError naming the policy file."""
    spec = policy.reviewer.model
    if not spec:
        return None
    try:
        return open_model(spec)
    except ConfigError as e:
        raise ConfigError(
            f"{policy.source}: [reviewer] model {spec!r} cannot be opened: {e.message}",
            **e.details,
        ) from e


def configured_sandbox() -> SandboxSettings:
    """The ``[sandbox]`` settings of the config files (defaults without any)."""
    from plait.adapters.tools import SandboxSettings
    from plait.config import load_config

    config = load_config()
    try:
        return SandboxSettings.from_mapping(config.sandbox)
    except ConfigError as e:
        where = ", ".join(config.sources) or "config"
        raise ConfigError(f"{where}: [sandbox]: {e.message}", **e.details) from e


def configured_mcp() -> dict[str, McpServerConfig]:
    """The ``[mcp.servers.NAME]`` tables of the config files (none without any)."""
    from plait.config import load_config

    config = load_config()
    if not config.mcp:
        return {}
    # imported only when servers are configured: the MCP SDK costs ~0.5 s of start-up
    from plait.adapters.mcp import servers_from_mapping

    try:
        return servers_from_mapping(config.mcp)
    except ConfigError as e:
        where = ", ".join(config.sources) or "config"
        raise ConfigError(f"{where}: {e.message}", **e.details) from e


def _renew_rule(
    gate: object, base: Policy | None
) -> Callable[[tuple[McpToolInfo, ...]], None] | None:
    """What keeps a governed gate's destructive rule for MCP tools up to date when a
    server's tool list changes (``None`` for another gate)."""
    governor = getattr(gate, "governor", None)
    if governor is None or base is None:
        return None
    from plait.adapters.mcp import with_destructive_rule

    def renew(infos: tuple[McpToolInfo, ...]) -> None:
        governor.policy = with_destructive_rule(base, infos)

    return renew


def _mcp_manager(
    servers: Mapping[str, McpServerConfig] | None, url: str, policy: Policy | None
) -> McpManager | None:
    """The manager of the MCP servers a session offers (``None`` without any): stdio
    servers get run_command's sandbox, with the policy's paths and the store hidden."""
    chosen = configured_mcp() if servers is None else dict(servers)
    if not chosen:
        return None
    from plait.adapters.mcp import McpManager
    from plait.adapters.stores import protected_paths
    from plait.adapters.tools.sandbox import with_policy

    return McpManager(
        chosen,
        sandbox=with_policy(configured_sandbox(), policy),
        protected=[str(p) for p in protected_paths(url)],
        environ=os.environ,  # secrets named by env_from and ${NAME} headers
        workspace=os.getcwd(),  # where servers start to list their tools
        protect_git=policy.protect_git if policy is not None else True,
    )


def offered_tools(
    *,
    db: str | None = None,
    policy: Policy | str | None = None,
    mcp_servers: Mapping[str, McpServerConfig] | None = None,
) -> list[dict[str, Any]]:
    """Every tool a session opened with these settings would offer (``plait tools
    list``): name, source (``built-in`` or ``mcp:SERVER``), effect class, and the policy's
    decision; ``per_call`` marks tools decided per path or per sub-command, shown with the
    decision for a workspace path no rule names (or the default for commands). Starts the
    MCP servers to list their tools, and stops them."""
    from plait.adapters.mcp import list_mcp_tools, with_destructive_rule
    from plait.application.compaction import RECALL_SPEC
    from plait.domain.policy import CallFacts

    url = db or default_db_url()
    chosen = _policy(policy)
    # recall comes with compaction, which every store that keeps summaries has
    builtin = [*(t.spec for t in _session_tools(url, chosen)), RECALL_SPEC]
    rows: list[tuple[ToolSpec, str, bool | None]] = [(s, "built-in", None) for s in builtin]
    manager = _mcp_manager(mcp_servers, url, chosen)
    if manager is not None:
        try:
            infos = list_mcp_tools(manager)
        finally:
            manager.close()
        chosen = with_destructive_rule(chosen, infos)
        rows += [(i.spec, f"mcp:{i.server}", i.destructive) for i in infos]
    out: list[dict[str, Any]] = []
    for spec, source, destructive in rows:
        read_only = spec.effect.value == "read_only"
        named = set(spec.parameters.get("properties", {})) & set(chosen.path_arguments)
        command = chosen.is_command_tool(spec.name)
        # A call naming a workspace path no rule mentions (file tools are decided per path)
        facts = CallFacts(tool=spec.name, read_only=read_only, paths=("f",) if named else ())
        verdict = chosen.evaluate(facts)
        action, rule = verdict.action.value, verdict.rule
        if command:
            action, rule = chosen.command.value, "defaults.command"
        out.append(
            {
                "name": spec.name,
                "source": source,
                "effect": spec.effect.value,
                "destructive": destructive,
                "decision": action,
                "rule": rule,
                "reason": verdict.reason if not command else "decided per sub-command",
                "per_call": bool(named) or command,
            }
        )
    return out


def _configured_compaction() -> CompactionSettings:
    """The ``[compaction]`` settings of the config files (defaults without any)."""
    from plait.config import load_config
    from plait.domain.compaction import CompactionSettings

    config = load_config()
    try:
        return CompactionSettings.from_mapping(config.compaction)
    except ConfigError as e:
        where = ", ".join(config.sources) or "config"
        raise ConfigError(f"{where}: [compaction]: {e.message}", **e.details) from e


def configured_subagents() -> list[SubAgent]:
    """The ``[agents.NAME]`` sub-agents of the config files."""
    from plait.config import load_config
    from plait.domain.subagents import SubAgent

    config = load_config()
    try:
        return [SubAgent.from_mapping(name, table) for name, table in config.agents.items()]
    except ConfigError as e:
        where = ", ".join(config.sources) or "config"
        raise ConfigError(f"{where}: {e.message}", **e.details) from e


def configured_retention() -> RetentionSettings:
    """The ``[retention]`` settings of the config files (no policy without any)."""
    from plait.config import load_config
    from plait.domain.retention import RetentionSettings

    config = load_config()
    try:
        return RetentionSettings.from_mapping(config.retention)
    except ConfigError as e:
        where = ", ".join(config.sources) or "config"
        raise ConfigError(f"{where}: [retention]: {e.message}", **e.details) from e


def _configured_model() -> str | None:
    from plait.config import load_config

    return load_config().model


def _retention(store: object, clock: Clock) -> RetentionService | None:
    from plait.application.retention import RetentionService

    if not hasattr(store, "expire_messages") or not hasattr(store, "get_fork_record"):
        return None
    return RetentionService(store=store, clock=clock)


def _webhooks(store: object, clock: Clock, ids: IdGenerator) -> WebhookService | None:
    from plait.application.webhooks import WebhookService

    if not hasattr(store, "claim_deliveries"):
        return None
    return WebhookService(store=store, clock=clock, ids=ids)  # type: ignore[arg-type]


def webhook_runtime(db: str | None = None) -> Runtime:
    """A runtime without a model or tools over the store named by ``db``, created if
    missing (an endpoint may be registered before the first run): ``plait webhooks``."""
    from plait.adapters.stores.shared.redact import redact_url
    from plait.adapters.system import RandomIds, SystemClock

    url = db or default_db_url()
    store = _open_store(url, create=True)
    return Runtime(
        store=store,
        artifacts=store,
        model=None,
        tools=(),
        clock=SystemClock(),
        ids=RandomIds(),
        location=redact_url(url),
    )


def _forks(
    store: object,
    clock: Clock,
    snapshots: WorkspaceSnapshots | None,
    telemetry: RunTelemetry | None,
) -> ForkService | None:
    from plait.application.fork import ForkService

    if not hasattr(store, "fork_session"):
        return None
    return ForkService(store=store, clock=clock, snapshots=snapshots, telemetry=telemetry)  # type: ignore[arg-type]


def configured_telemetry() -> RunTelemetry | None:
    """The OpenTelemetry adapter of the ``[telemetry]`` settings (``None``: off, the
    default; then nothing from OpenTelemetry is imported). ConfigError naming the file for
    a bad table, or naming the extra to install when the SDK is missing."""
    from plait.config import load_config

    config = load_config()
    if not config.telemetry:
        return None
    from plait.adapters.telemetry import TelemetrySettings, open_telemetry

    try:
        settings = TelemetrySettings.from_mapping(config.telemetry, os.environ)
        return open_telemetry(settings)
    except ConfigError as e:
        where = ", ".join(config.sources) or "config"
        raise ConfigError(f"{where}: [telemetry]: {e.message}", **e.details) from e


def _chosen_model(
    model: str | ModelClient | None,
    store_only: bool,
    tools: Sequence[ToolSpec],
    options: dict[str, Any],
) -> tuple[ModelClient | None, str | None]:
    """The model client and its spec (``None`` when given as a client or not at all)."""
    if store_only:
        return None, None
    options.setdefault("compaction", _configured_compaction())
    options.setdefault("subagents", configured_subagents())
    if model is not None and not isinstance(model, str):
        return model, None
    spec = model or os.environ.get("PLAIT_MODEL") or _configured_model()
    if not spec:
        return None, None
    if not spec.startswith("scripted:"):
        from plait.adapters.tokens import meter_for

        options.setdefault("meter_for", meter_for)
    from plait.application.compaction import RECALL_SPEC  # added with compaction on

    return open_model(spec, tools=[*tools, RECALL_SPEC]), spec


def _sweeper() -> LeftoverSweeper:
    from plait.adapters.tools.leftovers import WorkspaceLeftovers

    return WorkspaceLeftovers()


def _session_tools(url: str, policy: Policy | None) -> Sequence[Tool]:
    from plait.adapters.stores import protected_paths
    from plait.adapters.tools import session_tools

    # The sandbox enforces the policy's denied paths too (read-only / hidden).
    return session_tools(
        protected=protected_paths(url), policy=policy, sandbox=configured_sandbox()
    )


def _open_store(url: str, *, create: bool, io: IoMode = "inline") -> Any:
    """The store named by ``url``. With ``io="thread"`` (a process serving several runs)
    its blocking I/O runs off the event loop thread (issue 6 item 7): the SQLite store
    runs every call on its own I/O thread, a JSONL store is wrapped in
    :class:`~plait.adapters.stores.shared.offload.Offloaded`. With ``io="inline"`` (a
    process driving one run) they run on the loop's thread, without a round trip per call
    (issue 27 item 1). PostgreSQL is asynchronous and the memory store does no I/O."""
    from plait.adapters.stores import open_store

    store = open_store(url, create=create, io=io)
    if url.startswith("jsonl:") and io == "thread":
        from plait.adapters.stores.shared.offload import Offloaded

        return Offloaded(store)
    return store


class Runtime:
    """Everything a process needs to run agents: the store, the model, the tools, the
    :class:`~plait.application.service.AgentService` over them (the write side) and
    :class:`~plait.application.queries.Queries` (the read side)."""

    def __init__(
        self,
        *,
        store: SessionStore,
        artifacts: ArtifactStore,
        model: ModelClient | None,
        tools: Sequence[Tool],
        clock: Clock,
        ids: IdGenerator,
        instructions: str = DEFAULT_INSTRUCTIONS,
        budget: Budget | None = None,
        owner: str | None = None,
        lease_seconds: float = 60.0,
        compaction: CompactionSettings | None = None,
        meter_for: Callable[[ModelClient], TokenMeter] | None = None,
        location: str | None = None,
        meter: TokenMeter | None = None,
        retry: RetryPolicy | None = None,
        on_overflow: OverflowHook | None = None,
        gate: ToolGate | None = None,
        snapshots: WorkspaceSnapshots | None = None,
        model_spec: str | None = None,
        telemetry: RunTelemetry | None = None,
        subagents: Sequence[SubAgent] = (),
        mcp: McpManager | None = None,
        tool_source: ToolSource | None = None,
    ) -> None:
        """Compose the loop's stages (DESIGN §1) and the service over them. ``meter``:
        the ContextBuilder's token meter (default ``meter_for(model)``, else an estimate);
        ``retry``, ``on_overflow``: the ModelCaller's error policy; ``gate``: the ToolGate
        (default: allow); ``snapshots``: workspace snapshots for forks (:attr:`forks`);
        ``model_spec`` is recorded on runs so recovery and resume reopen that model;
        ``telemetry``: traces and metrics of runs and forks (``None``: off);
        ``subagents``: each gets a ``delegate_NAME`` tool and a service of its own for its
        child runs (see :mod:`plait.application.subagents`); ``mcp``: the MCP servers'
        manager, stopped by :meth:`close`; ``tool_source``: where some of ``tools`` come
        from and can change between steps (the MCP servers' lists)."""
        self.store = store
        self.telemetry = telemetry
        self.mcp = mcp
        self.artifacts = artifacts
        self.model = model
        where = location or f"(a {type(store).__name__})"
        self.queries = Queries(store=store, artifacts=artifacts, clock=clock, location=where)
        self.instructions = instructions
        self.compaction = _compaction(store, model, clock, ids, compaction, meter_for)
        """Compaction over this store and model (``None``: the store keeps no summaries)."""
        compacting = self.compaction is not None
        self.tools = tuple(tools := _with_recall(tools, store, compacting, model))
        self.forks = _forks(store, clock, snapshots, telemetry)  # None: the store cannot fork
        self.retention = _retention(store, clock)  # None: the store keeps no tombstones
        self.webhooks = _webhooks(store, clock, ids)  # None: the store has no outbox
        if meter is None and meter_for is not None and model is not None:
            meter = meter_for(model)
        delegations = [
            Delegation(
                agent,
                _child_service(
                    agent,
                    tools,
                    store=store,
                    artifacts=artifacts,
                    model=model,
                    clock=clock,
                    ids=ids,
                    budget=budget,
                    owner=owner,
                    lease_seconds=lease_seconds,
                    gate=gate,
                    retry=retry,
                    model_spec=model_spec,
                    telemetry=telemetry,
                ),
                self.forks,
            )
            for agent in subagents
        ]
        tools = [*tools, *(d.tool for d in delegations)]
        self.service = AgentService(
            store=store,
            artifacts=artifacts,
            model=model,
            tools=tools if tool_source is None else ToolSet(tools, tool_source),
            clock=clock,
            ids=ids,
            instructions=instructions,
            budget=budget,
            owner=owner,
            lease_seconds=lease_seconds,
            **_stages(tools, instructions, model, clock, artifacts, meter, retry, on_overflow),
            gate=gate or AllowAll(),
            compaction=self.compaction,
            model_spec=model_spec,
            model_factory=lambda spec: open_model(spec, tools=[t.spec for t in tools]),
            telemetry=telemetry,
        )
        for delegation in delegations:
            delegation.parent = self.service.driver
            self.service.subagents[delegation.agent.name] = delegation.child

    def approval_desk(self) -> ApprovalDesk:
        """Decisions about waiting calls and what then happens to their run (the CLI's
        ``approvals approve|deny``); a ConfigError when the store keeps no approvals."""
        from plait.application.approvals import ApprovalDesk

        if not hasattr(self.store, "decide_approval"):
            raise ConfigError(f"the store {self.queries.store_info().location} keeps no approvals")
        return ApprovalDesk(approvals=self.store, service=self.service)  # type: ignore[arg-type]

    @classmethod
    def open(
        cls,
        *,
        db: str | None = None,
        model: str | ModelClient | None = None,
        tools: Sequence[Tool] | None = None,
        create: bool = True,
        store_only: bool = False,
        policy: Policy | str | None = None,
        mcp_servers: Mapping[str, McpServerConfig] | None = None,
        store_io: IoMode = "inline",
        **options: Any,
    ) -> Runtime:
        """Open the store named by ``db`` (default :func:`default_db_url`) and the model
        named by ``model`` (default ``PLAIT_MODEL``; without one the service can read,
        cancel and resolve but not run). ``tools``: default the session tools. ``create=
        False`` refuses a missing store; ``store_only=True`` implies it (no model, no tools).
        Unless a ``gate`` is given, tool calls are governed by ``policy``
        (a :class:`~plait.domain.policy.Policy` or a file path; default ``PLAIT_POLICY``,
        else the built-in default policy, see docs/policy.md). Unless a ``telemetry`` is
        given, the ``[telemetry]`` table decides (:func:`configured_telemetry`).
        ``mcp_servers``: the MCP servers whose tools the session also gets (default the
        ``[mcp.servers]`` of plait.toml; ``{}`` for none); their destructive tools need
        approval unless a policy rule names them. ``store_io``: where the store's blocking
        calls run: ``"inline"`` for a process that drives one run at a time (the CLI, a
        script: no thread round trip per call), ``"thread"`` for one serving several (``plait
        serve``, workers: one slow fsync must not stall the others); see
        :data:`~plait.adapters.stores.shared.offload.IoMode`."""
        from plait.adapters.stores.shared.redact import redact_url
        from plait.adapters.system import RandomIds, SystemClock, process_owner

        url = db or default_db_url()
        governed = not store_only and "gate" not in options
        chosen = base = _policy(policy) if governed else None
        tools = () if store_only else _session_tools(url, chosen) if tools is None else tools
        manager = None if store_only else _mcp_manager(mcp_servers, url, chosen)
        infos: tuple[McpToolInfo, ...] = ()
        try:
            if manager is not None:
                from plait.adapters.mcp import list_mcp_tools, with_destructive_rule

                infos = list_mcp_tools(manager)
                if chosen is not None:
                    chosen = with_destructive_rule(chosen, infos)
            specs = [*(t.spec for t in tools), *(i.spec for i in infos)]
            model_client, spec = _chosen_model(model, store_only, specs, options)
            store = _open_store(url, create=create and not store_only, io=store_io)
        except BaseException:
            if manager is not None:
                manager.close()
            raise
        clock, ids = SystemClock(), RandomIds()
        if governed:
            options["gate"] = governed_gate(chosen, store, clock, ids, model_client)
        if manager is not None:
            from plait.adapters.mcp import McpToolSource, mcp_tools

            manager.stop_unhidden()  # listed before a new store existed: restart hiding it
            tools = [*tools, *mcp_tools(manager, infos, artifacts=store)]
            options["tool_source"] = McpToolSource(
                manager, infos, artifacts=store, on_change=_renew_rule(options.get("gate"), base)
            )
        if "telemetry" not in options:
            options["telemetry"] = configured_telemetry()
        if "snapshots" not in options:
            from plait.adapters.snapshots import GitSnapshots

            options["snapshots"] = GitSnapshots()
        return cls(
            store=store,
            artifacts=store,
            model=model_client,
            tools=tools,
            clock=clock,
            ids=ids,
            location=redact_url(url),
            model_spec=spec,
            mcp=manager,
            **({"owner": process_owner()} | options),
        )

    async def close(self) -> None:
        if self.mcp is not None:
            import asyncio

            await asyncio.to_thread(self.mcp.close)
        await self.store.close()
        shutdown = getattr(self.telemetry, "shutdown", None)
        if shutdown is not None:  # flush what is still buffered
            shutdown()
