"""Composition root: the only module that picks concrete adapters.

``Runtime`` takes every port as a keyword argument (tests pass fakes); ``Runtime.open``
builds the real ones from the :class:`~plait.settings.Settings` (resolved once, from the
defaults, the config files, the environment and its own arguments) and passes down what
each adapter needs: nothing below reads a config file or the environment.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from functools import cached_property, wraps
from pathlib import Path
from typing import TYPE_CHECKING, Any, ParamSpec, TypeAlias, TypeVar, cast

from plait._gc import long_lived
from plait.adapters import stores
from plait.adapters.stores import protected_paths, redact_url, store_kind
from plait.adapters.system import RandomIds, SystemClock, process_owner
from plait.application.service_config import DEFAULT_INSTRUCTIONS, check_config
from plait.domain.errors import ConfigError
from plait.settings import Settings, resolve_settings

if TYPE_CHECKING:
    from plait.adapters.mcp import McpManager, McpServerConfig, McpToolInfo
    from plait.adapters.stores import IoMode, PgEventFeed
    from plait.adapters.tools import SandboxSettings
    from plait.adapters.webhook_sender import HttpxSender
    from plait.application.approvals import ApprovalDesk
    from plait.application.compaction import CompactionService
    from plait.application.event_feed import LocalEventFeed, RunEventFeed
    from plait.application.fork import ForkService
    from plait.application.gate import ToolGate
    from plait.application.model_caller import OverflowHook, RetryPolicy
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
    from plait.application.queries import Queries
    from plait.application.retention import RetentionService
    from plait.application.service import AgentService
    from plait.application.subagents import Delegation
    from plait.application.toolset import ToolSet, ToolSource
    from plait.application.webhooks import WebhookDispatcher, WebhookService
    from plait.application.worker import EventEncoder, Worker
    from plait.domain.compaction import CompactionSettings
    from plait.domain.policy import Policy
    from plait.domain.retention import RetentionSettings
    from plait.domain.runs import Budget
    from plait.domain.subagents import SubAgent
    from plait.domain.tools import ToolSpec
    from plait.domain.webhooks import Endpoint
    from plait.settings import ServiceSettings

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
    "open_store",
    "token_meters",
    "webhook_runtime",
]


def data_dir() -> Path:
    """Where plait keeps its data by default: ``$XDG_DATA_HOME/plait``, else
    ``~/.local/share/plait`` (outside any project, so out of the agent's reach)."""
    return resolve_settings().data_dir


def default_db_url() -> str:
    """``PLAIT_DB`` if set, else ``plait.db`` in :func:`data_dir`."""
    return resolve_settings().db


def open_model(
    spec: str, *, tools: Sequence[ToolSpec] = (), settings: Settings | None = None
) -> ModelClient:
    """A model client for ``spec`` (``openai:gpt-4o``, ``scripted:demo.yaml``, a name from
    plait.toml, ...; see :mod:`plait.adapters.models`), with the config and keys of
    ``settings`` (default: resolved now). Imports no provider SDK."""
    # lazy: the model registry loads importlib.resources, bz2, lzma (~20 ms); runtime
    # users that never open a model (plait db upgrade, webhooks) skip it
    from plait.adapters.models import open_model as open_spec

    chosen = settings or resolve_settings()
    return open_spec(spec, tools=tools, config=chosen.config, env=chosen.environ)


def token_meters(settings: Settings) -> Callable[[ModelClient], TokenMeter]:
    """The token meter of each model client, as plait.toml declares it."""
    # lazy: the token meters (~15 ms), only for a runtime with a provider model
    from plait.adapters.tokens import meter_for

    def meter(client: ModelClient) -> TokenMeter:
        return meter_for(client, settings.config)

    return meter


def _summarizer(
    model: ModelClient | None, settings: CompactionSettings | None, opener: ModelOpener
) -> tuple[ModelClient | None, bool]:
    """The summarizer's model (the RFC's default: the run's model, see summarizer_for) and
    whether it follows the run's; a ``summarizer_model`` is opened now, so a bad spec or a
    missing key fails when the runtime is opened, not at its first compaction."""
    spec = settings.summarizer_model if settings is not None and model is not None else None
    return (opener(spec, ()), False) if spec else (model, True)


def _compaction(
    store: SessionStore,
    model: ModelClient | None,
    clock: Clock,
    ids: IdGenerator,
    settings: CompactionSettings | None,
    meter_for: Callable[[ModelClient], TokenMeter] | None,
    chosen: tuple[ModelClient | None, bool],
) -> CompactionService | None:
    if not store.capabilities.summaries:
        return None
    # lazy: compaction (~10 modules), built with the service at its first use
    from plait.application.compaction import CompactionService, ModelProfiles
    from plait.application.compaction.estimate import EstimateMeter

    def estimate(client: ModelClient) -> TokenMeter:
        return EstimateMeter()

    summarizer, follows = chosen
    clients = [c for c in (model, summarizer) if c is not None]
    profiles = ModelProfiles.of_clients(clients, meter_for or estimate)
    return CompactionService(
        store=store,  # type: ignore[arg-type]
        profiles=profiles,
        summarizer=summarizer,
        clock=clock,
        ids=ids,
        settings=settings,
        summarizer_follows_run=follows,
    )


def _with_recall(
    tools: Sequence[Tool], store: SessionStore, compacting: bool, model: ModelClient | None
) -> Sequence[Tool]:
    """With compaction on, the model also gets the built-in read-only ``recall`` tool
    (the originals a summary left out), unless a tool of that name is already there. A
    runtime with neither tools nor a model (``store_only``) runs nothing: no recall."""
    if not compacting or not store.capabilities.summaries:
        return tools
    if not tools and model is None:
        return tools
    if any(t.spec.name == "recall" for t in tools):
        return tools
    # lazy: the recall tool (3 modules, ~2 ms), only with compaction on; `plait sessions
    # list` and other store-only runtimes skip it
    from plait.application.compaction import recall_tool

    return [*tools, recall_tool(store)]


ModelOpener: TypeAlias = "Callable[[str, Sequence[ToolSpec]], ModelClient]"
"""Opens a model spec for the given tools (the settings' config and keys bound in)."""


def _tool_set(tools: Sequence[Tool], source: ToolSource) -> ToolSet:
    # lazy: only a runtime with a changing tool source (MCP servers) needs it
    from plait.application.toolset import ToolSet

    return ToolSet(tools, source)


def _opener(settings: Settings | None) -> ModelOpener:
    """Model specs opened with ``settings`` (resolved at the first spec opened when the
    runtime was built without them, e.g. from fakes in tests)."""

    def opener(spec: str, tools: Sequence[ToolSpec]) -> ModelClient:
        return open_model(spec, tools=tools, settings=settings)

    return opener


def _service(
    *,
    tools: Sequence[Tool] | ToolSet,
    specs: Sequence[Tool],
    instructions: str,
    model: ModelClient | None,
    store: SessionStore,
    artifacts: ArtifactStore,
    clock: Clock,
    ids: IdGenerator,
    budget: Budget | None,
    owner: str | None,
    lease_seconds: float,
    meter: TokenMeter | None,
    retry: RetryPolicy | None,
    on_overflow: OverflowHook | None,
    gate: ToolGate | None,
    compaction: CompactionService | None,
    model_spec: str | None,
    opener: ModelOpener,
    telemetry: RunTelemetry | None,
) -> AgentService:
    """The service over the loop's stages (docs/architecture.md) built here, and the recovery
    sweeper of interrupted writes; ``specs``: the tools the context and reopened models
    are told about."""
    # lazy: the service and the loop's stages (~25 ms of start-up), built at the first use
    # of Runtime.service, not by Runtime.open()
    from plait.application.context_builder import ContextBuilder
    from plait.application.gate import AllowAll
    from plait.application.model_caller import ModelCaller, no_overflow
    from plait.application.service import AgentService
    from plait.application.tool_runner import ToolRunner

    tool_specs = tuple(t.spec for t in specs)
    return AgentService.build(
        store=store,
        artifacts=artifacts,
        model=model,
        tools=tools,
        clock=clock,
        ids=ids,
        instructions=instructions,
        budget=budget,
        owner=owner,
        lease_seconds=lease_seconds,
        context=ContextBuilder(instructions=instructions, tools=tool_specs, meter=meter),
        caller=ModelCaller(
            model, clock=clock, policy=retry, on_overflow=on_overflow or no_overflow
        ),
        runner=ToolRunner(artifacts),
        sweeper=_sweeper(),
        gate=gate or AllowAll(),
        compaction=compaction,
        model_spec=model_spec,
        model_factory=lambda spec: opener(spec, tool_specs),
        telemetry=telemetry,
    )


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
    opener: ModelOpener,
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
        child_model = opener(agent.model, [t.spec for t in child_tools])
    if agent.policy is not None:  # its own rules; approvals in the same store (one inbox)
        if not store.capabilities.approvals:
            raise ConfigError(
                f"sub-agent {agent.name!r} has a policy, but this store keeps no approvals",
                subagent=agent.name,
            )
        gate = governed_gate(
            agent.policy, cast("ApprovalStore", store), clock, ids, child_model, opener=opener
        )
    return _service(
        tools=child_tools,
        specs=child_tools,
        instructions=agent.instructions,
        model=child_model,
        store=store,
        artifacts=artifacts,
        clock=clock,
        ids=ids,
        budget=budget,
        owner=owner,
        lease_seconds=lease_seconds,
        meter=None,
        retry=retry,
        on_overflow=None,
        gate=gate,
        compaction=None,
        model_spec=agent.model or model_spec,
        opener=opener,
        telemetry=telemetry,
    )


def _policy(policy: Policy | str | None, settings: Settings | None = None) -> Policy:
    """``policy`` itself, the file it names, else the settings' policy file (default:
    resolved now), else the built-in default."""
    # lazy: tomllib and the policy rules (~20 ms), only for a governed runtime
    from plait.adapters.policy_file import policy_from
    from plait.domain.policy import Policy

    if isinstance(policy, Policy):
        return policy
    return policy_from(policy or (settings or resolve_settings()).policy)


def governed_gate(
    policy: Policy | str | None,
    approvals: ApprovalStore,
    clock: Clock,
    ids: IdGenerator,
    model: ModelClient | None,
    *,
    opener: ModelOpener | None = None,
) -> ToolGate:
    """The policy → reviewer → approval gate (docs/design.md#governance) over ``approvals``;
    ``policy`` is a Policy, a file path, or ``None`` for ``PLAIT_POLICY`` / the built-in default. A
    policy whose ``[reviewer] model`` names a model gets a reviewer with that model
    (opened here with ``opener``, so a bad spec or a missing key fails now); otherwise the
    reviewer uses the run's model."""
    return _gate_builder(policy, approvals, clock, ids, model, opener=opener)()


def _gate_builder(
    policy: Policy | str | None,
    approvals: ApprovalStore,
    clock: Clock,
    ids: IdGenerator,
    model: ModelClient | None,
    *,
    opener: ModelOpener | None = None,
) -> Callable[[], ToolGate]:
    """:func:`governed_gate` in two steps: the policy is read and the reviewer's own
    model opened now (what can fail fails now), the gate's stages are built by the
    function returned (Runtime.open() calls it with the service, at its first use)."""
    chosen = _policy(policy)
    own = _reviewer_model(chosen, opener or _opener(None))

    def build() -> ToolGate:
        # lazy: the governance stages and adapters.tools (~25 ms), built with the service
        from plait.adapters.tools.probe import FileProbe
        from plait.application.governance.gate import GovernedGate
        from plait.application.governance.governor import Governor
        from plait.application.governance.reviewer import Reviewer

        named = own or model
        reviewer = Reviewer(
            config=chosen.reviewer, model=own, name=named.name if named else "reviewer"
        )
        governor = Governor(
            policy=chosen,
            approvals=approvals,
            clock=clock,
            ids=ids,
            reviewer=reviewer,
            probe=FileProbe(),
        )
        return GovernedGate(governor)

    return build


def _reviewer_model(policy: Policy, opener: ModelOpener) -> ModelClient | None:
    """The reviewer's own model (``[reviewer] model``), opened with no tools: it only
    judges; a spec that cannot be opened is a ConfigError naming the policy file."""
    spec = policy.reviewer.model
    if not spec:
        return None
    try:
        return opener(spec, ())
    except ConfigError as error:
        raise ConfigError(
            f"{policy.source}: [reviewer] model {spec!r} cannot be opened: {error.message}",
            **error.details,
        ) from error


def configured_sandbox(settings: Settings | None = None) -> SandboxSettings:
    """The ``[sandbox]`` settings of the config files (defaults without any)."""
    # lazy: adapters.tools loads shutil, lzma, bz2 (~15 ms), only for tools and MCP servers
    from plait.adapters.tools import SandboxSettings

    config = (settings or resolve_settings()).config
    try:
        return SandboxSettings.from_mapping(config.sandbox)
    except ConfigError as error:
        where = ", ".join(config.sources) or "config"
        raise ConfigError(f"{where}: [sandbox]: {error.message}", **error.details) from error


def configured_mcp(settings: Settings | None = None) -> dict[str, McpServerConfig]:
    """The ``[mcp.servers.NAME]`` tables of the config files (none without any)."""
    config = (settings or resolve_settings()).config
    if not config.mcp:
        return {}
    # lazy: the MCP SDK costs ~0.5 s of start-up, imported only when servers are configured
    from plait.adapters.mcp import servers_from_mapping

    try:
        return servers_from_mapping(config.mcp)
    except ConfigError as error:
        where = ", ".join(config.sources) or "config"
        raise ConfigError(f"{where}: {error.message}", **error.details) from error


def _renew_rule(
    gate: object, base: Policy | None
) -> Callable[[tuple[McpToolInfo, ...]], None] | None:
    """What keeps a governed gate's destructive rule for MCP tools up to date when a
    server's tool list changes (``None`` for another gate)."""
    governor = getattr(gate, "governor", None)
    if governor is None or base is None:
        return None
    # lazy: the MCP SDK (~0.5 s), only when MCP servers are configured
    from plait.adapters.mcp import with_destructive_rule

    def renew(infos: tuple[McpToolInfo, ...]) -> None:
        governor.policy = with_destructive_rule(base, infos)

    return renew


def _mcp_manager(
    servers: Mapping[str, McpServerConfig] | None, settings: Settings, policy: Policy | None
) -> McpManager | None:
    """The manager of the MCP servers a session offers (``None`` without any): stdio
    servers get run_command's sandbox, with the policy's paths and the store hidden."""
    chosen = configured_mcp(settings) if servers is None else dict(servers)
    if not chosen:
        return None
    # lazy: the MCP SDK (~0.5 s) and adapters.tools (shutil, lzma: ~15 ms), only with servers
    from plait.adapters.mcp import McpManager
    from plait.adapters.tools.sandbox import with_policy

    return McpManager(
        chosen,
        sandbox=with_policy(configured_sandbox(settings), policy),
        protected=[str(p) for p in protected_paths(settings.db)],
        environ=settings.environ,  # secrets named by env_from and ${NAME} headers
        workspace=os.getcwd(),  # where servers start to list their tools
        protect_git=policy.protect_git if policy is not None else True,
        protect_config=policy.protect_config if policy is not None else True,
    )


def offered_tools(
    *,
    db: str | None = None,
    policy: Policy | str | None = None,
    mcp_servers: Mapping[str, McpServerConfig] | None = None,
    settings: Settings | None = None,
) -> list[dict[str, Any]]:
    """Every tool a session opened with these settings would offer (``plait tools
    list``): name, source (``built-in`` or ``mcp:SERVER``), effect class, and the policy's
    decision; ``per_call`` marks tools decided per path or per sub-command, shown with the
    decision for a workspace path no rule names (or the default for commands). Starts the
    MCP servers to list their tools, and stops them."""
    # lazy: the MCP SDK (~0.5 s) and the policy rules (~10 ms), for `plait tools list` only
    from plait.adapters.mcp import list_mcp_tools, with_destructive_rule
    from plait.application.compaction import RECALL_SPEC
    from plait.domain.policy import CallFacts

    resolved = settings or resolve_settings(db=db)
    chosen = _policy(policy, resolved)
    # recall comes with compaction, which every store that keeps summaries has
    builtin = [*(t.spec for t in _session_tools(resolved, chosen)), RECALL_SPEC]
    rows: list[tuple[ToolSpec, str, bool | None]] = [(s, "built-in", None) for s in builtin]
    manager = _mcp_manager(mcp_servers, resolved, chosen)
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


def _configured_compaction(settings: Settings) -> CompactionSettings | None:
    """The ``[compaction]`` settings of the config files (``None``, the defaults, without
    the table)."""
    config = settings.config
    if not config.compaction:
        return None
    # lazy: the compaction settings (~3 ms of start-up), only with a [compaction] table
    from plait.domain.compaction import CompactionSettings

    try:
        return CompactionSettings.from_mapping(config.compaction)
    except ConfigError as error:
        where = ", ".join(config.sources) or "config"
        raise ConfigError(f"{where}: [compaction]: {error.message}", **error.details) from error


def configured_subagents(settings: Settings | None = None) -> list[SubAgent]:
    """The ``[agents.NAME]`` sub-agents of the config files."""
    config = (settings or resolve_settings()).config
    if not config.agents:
        return []
    # lazy: the sub-agents' domain, only for a config that declares some
    from plait.domain.subagents import SubAgent

    try:
        return [SubAgent.from_mapping(name, table) for name, table in config.agents.items()]
    except ConfigError as error:
        where = ", ".join(config.sources) or "config"
        raise ConfigError(f"{where}: {error.message}", **error.details) from error


def configured_retention(settings: Settings | None = None) -> RetentionSettings:
    """The ``[retention]`` settings of the config files (no policy without any)."""
    # lazy: the retention settings' module, only where a command or the service asks
    from plait.domain.retention import RetentionSettings

    config = (settings or resolve_settings()).config
    try:
        return RetentionSettings.from_mapping(config.retention)
    except ConfigError as error:
        where = ", ".join(config.sources) or "config"
        raise ConfigError(f"{where}: [retention]: {error.message}", **error.details) from error


def _retention(store: SessionStore, clock: Clock) -> RetentionService | None:
    if not (store.capabilities.retention and store.capabilities.forks):
        return None
    # lazy: built at first use (plait sessions expire, a worker's sweep); not on open
    from plait.application.retention import RetentionService

    return RetentionService(store=store, clock=clock)


def _webhooks(store: SessionStore, clock: Clock, ids: IdGenerator) -> WebhookService | None:
    if not store.capabilities.webhooks:
        return None
    # lazy: built at first use (plait webhooks, a worker's outbox); not on open
    from plait.application.webhooks import WebhookService

    return WebhookService(store=store, clock=clock, ids=ids)  # type: ignore[arg-type]


def webhook_runtime(db: str | None = None, settings: Settings | None = None) -> Runtime:
    """A runtime without a model or tools over the store named by ``db``, created if
    missing (an endpoint may be registered before the first run): ``plait webhooks``."""
    url = (settings or resolve_settings(db=db)).db
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
    store: SessionStore,
    clock: Clock,
    snapshots: WorkspaceSnapshots | None,
    telemetry: RunTelemetry | None,
) -> ForkService | None:
    if not store.capabilities.forks:
        return None
    # lazy: built at first use (a fork, a sub-agent's delegation); not on open
    from plait.application.fork import ForkService

    return ForkService(store=store, clock=clock, snapshots=snapshots, telemetry=telemetry)  # type: ignore[arg-type]


def configured_telemetry(settings: Settings | None = None) -> RunTelemetry | None:
    """The OpenTelemetry adapter of the ``[telemetry]`` settings (``None``: off, the
    default; then nothing from OpenTelemetry is imported). ConfigError naming the file for
    a bad table, or naming the extra to install when the SDK is missing."""
    resolved = settings or resolve_settings()
    config = resolved.config
    if not config.telemetry:
        return None
    # lazy: OpenTelemetry's SDK (~100+ ms), only when the [telemetry] table is set
    from plait.adapters.telemetry import TelemetrySettings, open_telemetry

    try:
        chosen = TelemetrySettings.from_mapping(config.telemetry, resolved.environ)
        return open_telemetry(chosen)
    except ConfigError as error:
        where = ", ".join(config.sources) or "config"
        raise ConfigError(f"{where}: [telemetry]: {error.message}", **error.details) from error


def _chosen_model(
    model: str | ModelClient | None, settings: Settings, tools: Sequence[ToolSpec]
) -> tuple[ModelClient | None, str | None]:
    """The model client and its spec (``None`` when given as a client or not at all)."""
    if model is not None and not isinstance(model, str):
        return model, None
    spec = model or settings.model
    if not spec:
        return None, None
    # lazy: the recall tool (3 modules, ~2 ms), added with compaction on; only with a model
    from plait.application.compaction import RECALL_SPEC

    return open_model(spec, tools=[*tools, RECALL_SPEC], settings=settings), spec


def _sweeper() -> LeftoverSweeper:
    # lazy: adapters.tools loads shutil, lzma, bz2 (~15 ms); `plait init` and `plait db
    # upgrade` import the runtime without building a service
    from plait.adapters.tools.leftovers import WorkspaceLeftovers

    return WorkspaceLeftovers()


def _session_tools(settings: Settings, policy: Policy | None) -> Sequence[Tool]:
    # lazy: adapters.tools loads shutil, lzma, bz2 (~15 ms); runtime users that only open a
    # model or a store (plait init, plait db upgrade) skip it
    from plait.adapters.tools import session_tools

    # The sandbox enforces the policy's denied paths too (read-only / hidden).
    return session_tools(
        protected=protected_paths(settings.db),
        policy=policy,
        sandbox=configured_sandbox(settings),
    )


def _open_store(url: str, *, create: bool, io: IoMode = "inline") -> Any:
    """The store named by ``url``. With ``io="thread"`` (a process serving several runs)
    its blocking I/O runs off the event loop thread (issue 6 item 7): the SQLite store
    runs every call on its own I/O thread, a JSONL store is wrapped in
    :class:`~plait.adapters.stores.shared.offload.Offloaded`. With ``io="inline"`` (a
    process driving one run) they run on the loop's thread, without a round trip per call
    (issue 27 item 1). PostgreSQL is asynchronous and the memory store does no I/O."""
    store = stores.open_store(url, create=create, io=io)
    if stores.store_kind(url) == "jsonl" and io == "thread":
        # lazy: the I/O thread and queue (~3 ms), only for JSONL in a serving process
        from plait.adapters.stores import Offloaded

        return Offloaded(store)
    return store


_P = ParamSpec("_P")
_R = TypeVar("_R")


def _made_to_last(build: Callable[_P, _R]) -> Callable[_P, _R]:
    """``build`` with the cyclic GC paused, and what exists afterwards moved to its oldest
    generation (:func:`plait._gc.long_lived`): the modules opening a runtime imports and
    the runtime it builds live as long as the process, and collections while they are
    made would scan them for nothing (13 of them in ``Runtime.open()`` with defaults)."""

    @wraps(build)
    def built(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        with long_lived():
            return build(*args, **kwargs)

    return built


def open_store(db: str | None = None, *, create: bool = True) -> Any:
    """The store named by ``db`` (default :func:`default_db_url`) opened as a runtime opens
    it, for the commands that need the store alone (``plait db upgrade``, ``plait keys
    create``)."""
    return _open_store(db or default_db_url(), create=create)


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
        settings: Settings | None = None,
    ) -> None:
        """Compose the loop's stages (docs/architecture.md) and the service over them (built at the
        first use of :attr:`service`; what it would refuse is checked now). ``meter``:
        the ContextBuilder's token meter (default ``meter_for(model)``, else an estimate);
        ``retry``, ``on_overflow``: the ModelCaller's error policy; ``gate``: the ToolGate
        (default: allow); ``snapshots``: workspace snapshots for forks (:attr:`forks`);
        ``model_spec`` is recorded on runs so recovery and resume reopen that model;
        ``telemetry``: traces and metrics of runs and forks (``None``: off);
        ``subagents``: each gets a ``delegate_NAME`` tool and a service of its own for its
        child runs (see :mod:`plait.application.subagents`); ``mcp``: the MCP servers'
        manager, stopped by :meth:`close`; ``tool_source``: where some of ``tools`` come
        from and can change between steps (the MCP servers' lists); ``settings``: the
        config and keys model specs are opened with (default: resolved when a spec is
        first opened)."""
        self.store = store
        self.settings = settings
        self.telemetry = telemetry
        self.mcp = mcp
        self.artifacts = artifacts
        self.model = model
        opener = _opener(settings)
        self._clock, self._ids, self._snapshots = clock, ids, snapshots
        self._location = location or f"(a {type(store).__name__})"
        self.instructions = instructions
        compacting = store.capabilities.summaries
        summarizer = _summarizer(model, compaction, opener) if compacting else (model, True)

        def build_compaction() -> CompactionService | None:
            return _compaction(store, model, clock, ids, compaction, meter_for, summarizer)

        self._build_compaction = build_compaction
        self.tools = tuple(tools := _with_recall(tools, store, compacting, model))
        if meter is None and meter_for is not None and model is not None:
            meter = meter_for(model)
        delegations: list[Delegation] = []
        if subagents:
            # lazy: the delegation tools, only for a runtime with sub-agents
            from plait.application.subagents import Delegation

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
                        opener=opener,
                    ),
                    self.forks,
                )
                for agent in subagents
            ]
        tools = [*tools, *(d.tool for d in delegations)]
        check_config(tools, lease_seconds)  # what the service refuses fails now, not at first use
        self._gate: Callable[[], ToolGate | None] = lambda: gate

        def build_service() -> AgentService:
            service = _service(
                tools=tools if tool_source is None else _tool_set(tools, tool_source),
                specs=tools,
                instructions=instructions,
                model=model,
                store=store,
                artifacts=artifacts,
                clock=clock,
                ids=ids,
                budget=budget,
                owner=owner,
                lease_seconds=lease_seconds,
                meter=meter,
                retry=retry,
                on_overflow=on_overflow,
                gate=self._gate(),
                compaction=self.compaction,
                model_spec=model_spec,
                opener=opener,
                telemetry=telemetry,
            )
            for delegation in delegations:
                delegation.parent = service.driver
                service.subagents[delegation.agent.name] = delegation.child
            return service

        self._build_service = build_service

    # The service, the read side and the services beside the loop are built at their first
    # use, so Runtime.open() does not import them (issue 27 item 4); what can fail (a model
    # spec, a sub-agent's tools) is checked when the runtime is built. The service, which
    # imports the loop's modules, is built with the GC paused, as the runtime is.

    @cached_property
    @_made_to_last
    def service(self) -> AgentService:
        """The write side: sessions and runs driven through the loop's stages."""
        return self._build_service()

    @cached_property
    def compaction(self) -> CompactionService | None:
        """Compaction over this store and model (``None``: the store keeps no summaries)."""
        return self._build_compaction()

    @cached_property
    def queries(self) -> Queries:
        """The read side: sessions, runs, messages, approvals, as the CLI and API show them."""
        # lazy: the read side (~3 ms of start-up), built at its first use
        from plait.application.queries import Queries

        return Queries(
            store=self.store, artifacts=self.artifacts, clock=self._clock, location=self._location
        )

    @cached_property
    def forks(self) -> ForkService | None:
        """Forks of sessions (``None``: the store cannot fork)."""
        return _forks(self.store, self._clock, self._snapshots, self.telemetry)

    @cached_property
    def retention(self) -> RetentionService | None:
        """Expiry of sessions and runs (``None``: the store keeps no tombstones)."""
        return _retention(self.store, self._clock)

    @cached_property
    def webhooks(self) -> WebhookService | None:
        """Webhook endpoints and deliveries (``None``: the store has no outbox)."""
        return _webhooks(self.store, self._clock, self._ids)

    def approval_desk(self) -> ApprovalDesk:
        """Decisions about waiting calls and what then happens to their run (the CLI's
        ``approvals approve|deny``); a ConfigError when the store keeps no approvals."""
        # lazy: only `plait approvals` decides; Runtime.open() does not load it (~1 ms)
        from plait.application.approvals import ApprovalDesk

        if not self.store.capabilities.approvals:
            raise ConfigError(f"the store {self.queries.store_info().location} keeps no approvals")
        return ApprovalDesk(approvals=self.store, service=self.service)  # type: ignore[arg-type]

    @classmethod
    @_made_to_last
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
        settings: Settings | None = None,
        instructions: str = DEFAULT_INSTRUCTIONS,
        budget: Budget | None = None,
        owner: str | None = None,
        lease_seconds: float = 60.0,
        compaction: CompactionSettings | None = None,
        subagents: Sequence[SubAgent] | None = None,
        meter_for: Callable[[ModelClient], TokenMeter] | None = None,
        meter: TokenMeter | None = None,
        retry: RetryPolicy | None = None,
        on_overflow: OverflowHook | None = None,
        gate: ToolGate | None = None,
        snapshots: WorkspaceSnapshots | None = None,
        telemetry: RunTelemetry | None = None,
        store_io: IoMode = "inline",
    ) -> Runtime:
        """Open the store named by ``db`` and the model named by ``model`` (defaults: the
        ``settings``, else those resolved now from the config files and the environment:
        ``PLAIT_DB`` or ``plait.db`` in :func:`data_dir`, ``PLAIT_MODEL`` or plait.toml's
        ``model``; without one the service can read, cancel and resolve but not run).
        ``tools``: default the session tools. ``create=False`` refuses a missing store;
        ``store_only=True`` implies it (no model, no tools). Unless a ``gate`` is given,
        tool calls are governed by ``policy`` (a :class:`~plait.domain.policy.Policy` or a
        file path; default ``PLAIT_POLICY``, else the built-in default policy, see
        docs/policy.md). Unless a ``telemetry`` is given, the ``[telemetry]`` table
        decides (:func:`configured_telemetry`); ``compaction`` and ``subagents`` default
        to the ``[compaction]`` and ``[agents.NAME]`` tables, ``snapshots`` to git
        worktrees in the data directory. ``mcp_servers``: the MCP servers whose tools the
        session also gets (default the ``[mcp.servers]`` of plait.toml; ``{}`` for none);
        their destructive tools need approval unless a policy rule names them.
        ``store_io``: where the store's blocking calls run: ``"inline"`` for a process that
        drives one run at a time (the CLI, a script: no thread round trip per call),
        ``"thread"`` for one serving several (``plait serve``, workers: one slow fsync must
        not stall the others); see :data:`~plait.adapters.stores.shared.offload.IoMode`.
        The other keywords are :class:`Runtime`'s."""
        if settings is None:
            settings = resolve_settings(db=db)
        elif db is not None:
            settings = replace(settings, db=db)
        url = settings.db
        governed = not store_only and gate is None
        chosen = base = _policy(policy, settings) if governed else None
        tools = () if store_only else _session_tools(settings, chosen) if tools is None else tools
        manager = None if store_only else _mcp_manager(mcp_servers, settings, chosen)
        infos: tuple[McpToolInfo, ...] = ()
        model_client: ModelClient | None = None
        spec: str | None = None
        try:
            if manager is not None:
                # lazy: the MCP SDK (~0.5 s), only when MCP servers are configured
                from plait.adapters.mcp import list_mcp_tools, with_destructive_rule

                infos = list_mcp_tools(manager)
                if chosen is not None:
                    chosen = with_destructive_rule(chosen, infos)
            if not store_only:
                if compaction is None:
                    compaction = _configured_compaction(settings)
                if subagents is None:
                    subagents = configured_subagents(settings)
                specs = [*(t.spec for t in tools), *(i.spec for i in infos)]
                model_client, spec = _chosen_model(model, settings, specs)
                if meter_for is None and spec is not None and not spec.startswith("scripted:"):
                    meter_for = token_meters(settings)
            store = _open_store(url, create=create and not store_only, io=store_io)
        except BaseException:
            if manager is not None:
                manager.close()
            raise
        clock, ids = SystemClock(), RandomIds()
        make_gate = None
        if governed:
            make_gate = _gate_builder(
                chosen, store, clock, ids, model_client, opener=_opener(settings)
            )
            if subagents or manager is not None:  # child services and MCP rules need it now
                gate = make_gate()
        tool_source: ToolSource | None = None
        if manager is not None:
            # lazy: the MCP SDK (~0.5 s), only when MCP servers are configured
            from plait.adapters.mcp import McpToolSource, mcp_tools

            manager.stop_unhidden()  # listed before a new store existed: restart hiding it
            tools = [*tools, *mcp_tools(manager, infos, artifacts=store)]
            tool_source = McpToolSource(
                manager, infos, artifacts=store, on_change=_renew_rule(gate, base)
            )
        if telemetry is None:
            telemetry = configured_telemetry(settings)
        if snapshots is None:
            # lazy: shutil, tempfile, lzma (~3 ms) for git worktrees; not when given snapshots
            from plait.adapters.snapshots import GitSnapshots

            snapshots = GitSnapshots(settings.worktrees_dir)
        runtime = cls(
            store=store,
            artifacts=store,
            model=model_client,
            tools=tools,
            clock=clock,
            ids=ids,
            instructions=instructions,
            budget=budget,
            owner=owner or process_owner(),
            lease_seconds=lease_seconds,
            compaction=compaction,
            meter_for=meter_for,
            location=redact_url(url),
            meter=meter,
            retry=retry,
            on_overflow=on_overflow,
            gate=gate,
            snapshots=snapshots,
            model_spec=spec,
            telemetry=telemetry,
            subagents=subagents or (),
            mcp=manager,
            tool_source=tool_source,
            settings=settings,
        )
        if make_gate is not None and gate is None:  # built with the service, at first use
            runtime._gate = make_gate
        return runtime

    def resolved_settings(self) -> Settings:
        """The settings this runtime was opened with (resolved now, once, for one built
        from parts without them)."""
        if self.settings is None:
            self.settings = resolve_settings()
        return self.settings

    def event_feed(self, db: str, poll_seconds: float = 0.5) -> LocalEventFeed | PgEventFeed:
        """Live events for the SSE streams of this process: PostgreSQL ``LISTEN`` (events
        of workers anywhere), else in-process (the embedded worker tells it directly).
        ``db``: the store's URL when the store does not say it."""
        url = getattr(self.store, "url", db)
        if store_kind(url) == "postgres":
            # lazy: psycopg (~175 ms), only for `plait serve` on PostgreSQL
            from plait.adapters.stores import PgEventFeed

            return PgEventFeed(url, poll_seconds=poll_seconds)
        # lazy: only `plait serve` streams events; Runtime.open() does not load it (~1 ms)
        from plait.application.event_feed import LocalEventFeed

        return LocalEventFeed(poll_seconds=poll_seconds)

    def worker(
        self,
        *,
        encode: EventEncoder,
        concurrency: int,
        grace_seconds: float,
        feed: RunEventFeed | None = None,
    ) -> Worker:
        """A worker driving this store's queued runs with this runtime's service;
        ``encode``: how its run events are stored (the HTTP API's shapes)."""
        # lazy: only `plait serve` and workers drive queued runs; not Runtime.open() (~3 ms)
        from plait.adapters.system import owner_alive
        from plait.application.worker import Worker

        return Worker(
            service=self.service,
            queue=self.store,  # type: ignore[arg-type]
            encode=encode,
            concurrency=concurrency,
            grace_seconds=grace_seconds,
            feed=feed,
            owner_alive=owner_alive,
        )

    def configured_webhooks(self) -> list[Endpoint]:
        """The ``[webhooks.NAME]`` endpoints of the config files, their secrets looked up
        in the environment; a bad table is a ConfigError naming it."""
        # lazy: the webhooks' domain module, only for a worker that registers endpoints
        from plait.domain.webhooks import configured_endpoints

        settings = self.resolved_settings()
        return configured_endpoints(settings.config.webhooks, settings.environ)

    def webhook_dispatcher(self, service: ServiceSettings) -> tuple[WebhookDispatcher, HttpxSender]:
        """The webhook delivery loop of a worker over this store's outbox, and the HTTP
        sender it posts with (the caller closes it)."""
        # lazy: httpx (~190 ms) and the delivery loop, only for a worker that delivers
        # webhooks
        from plait.adapters.webhook_sender import HttpxSender
        from plait.application.webhooks import WebhookDispatcher

        sender = HttpxSender(
            timeout=service.webhook_timeout_seconds,
            private_networks=service.webhook_private_networks,
        )
        dispatcher = WebhookDispatcher(
            store=self.store,  # type: ignore[arg-type]
            sender=sender,
            clock=self.service.clock,
            owner=self.service.owner,
            lease_seconds=max(service.webhook_lease_seconds, service.webhook_timeout_seconds),
            poll_seconds=service.webhook_poll_seconds,
            schedule=service.webhook_retry_seconds,
            pause_after=service.webhook_pause_after,
        )
        return dispatcher, sender

    async def close(self) -> None:
        if self.mcp is not None:
            await asyncio.to_thread(self.mcp.close)
        await self.store.close()
        shutdown = getattr(self.telemetry, "shutdown", None)
        if shutdown is not None:  # flush what is still buffered
            shutdown()
