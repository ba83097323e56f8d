"""User configuration: ``plait.toml`` in the project (the current directory) over
``~/.config/plait/config.toml`` (``$XDG_CONFIG_HOME`` honoured); environment variables
over both; command-line flags over all.

Format::

    model = "anthropic:claude-sonnet-4-5"      # default model (PLAIT_MODEL and --model win)
    policy = "plait-policy.toml"                # tool policy file, relative to this file
                                                # (PLAIT_POLICY and --policy win)

    [models.local-qwen]                         # a name usable as --model local-qwen
    spec = "openai-compatible:http://localhost:8000/v1#Qwen/Qwen3-8B"
    key_env = "VLLM_API_KEY"                    # variable holding the key (optional here)
    context_window = 32768
    max_output_tokens = 4096
    parallel_tool_calls = false
    price_input_per_mtok = 0.0
    idle_timeout_seconds = 120                  # a call silent this long is retried

    [models."openai:gpt-4o"]                    # overrides for a built-in model
    base_url = "https://proxy.example/v1"
    price_input_per_mtok = 2.0

    [sandbox]                                   # run_command's sandbox (README: run_command
    read_only = ["deploy/**"]                   # and the sandbox); merged key by key,
    test_command = "uv run pytest -q"           # project over user

    [compaction]                                # README: Compaction; merged key by key
    threshold = 0.8
    summarizer_model = "openai:gpt-4o-mini"     # default "": the session's model

    [retention]                                 # README: Retention; merged key by key
    raw_history_days = 90                       # `plait retention expire` default age
    mode = "archive"                            # "expire" (default) or "archive"

    [telemetry]                                 # README: Telemetry (OpenTelemetry)
    enabled = true                              # default false; needs plait[otel]
    capture_content = false                     # message contents and tool arguments
    [agents.reviewer]                           # README: Sub-agents; a table per agent,
    instructions = "Review the diff."           # project over user, key by key
    tools = ["read_file", "grep"]
    max_model_calls = 10
    [webhooks.ops]                              # README: Webhooks; an endpoint for every
    url = "https://ops.example/hooks"           # principal's events, registered by the
    events = ["run.finished", "outcome.unknown"]  # workers at start-up (id cfg_ops)
    secret_env = "OPS_WEBHOOK_SECRET"           # holds its whsec_ secret

    [mcp.servers.time]                          # README: MCP servers
    command = "mcp-server-time"

Unknown keys and wrong types are errors naming the file and the key, never ignored.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import field
from pathlib import Path
from typing import Any

from plait.domain.errors import ConfigError
from plait.domain.record import record

__all__ = ["Config", "ModelEntry", "config_paths", "load_config"]

_BOOL = ("tool_calls", "structured_output", "streaming", "parallel_tool_calls", "reasoning")
_INT = ("context_window", "max_output_tokens", "thinking_budget")
_FLOAT = (
    "price_input_per_mtok",
    "price_output_per_mtok",
    "price_cached_input_per_mtok",
    "idle_timeout_seconds",
)
_STR = ("spec", "base_url", "key_env")
_TOP = (
    "model",
    "policy",
    "models",
    "sandbox",
    "compaction",
    "retention",
    "telemetry",
    "agents",
    "webhooks",
    "mcp",
)


@record(kw_only=True)
class ModelEntry:
    """One ``[models.NAME]`` table: where the model is, its key variable, its
    capabilities and prices (``None``: not declared, the built-in table decides)."""

    name: str
    source: str
    spec: str | None = None
    base_url: str | None = None
    key_env: str | None = None
    settings: Mapping[str, Any] = field(default_factory=dict)
    """Capability, price and model settings declared for it (only keys that were set)."""


@record(kw_only=True)
class Config:
    model: str | None = None
    policy: str | None = None
    """The policy file the config files name (``policy``), as an absolute path."""
    models: Mapping[str, ModelEntry] = field(default_factory=dict)
    sources: tuple[str, ...] = ()
    sandbox: Mapping[str, Any] = field(default_factory=dict)
    """The merged ``[sandbox]`` tables, checked by ``SandboxSettings.from_mapping``."""
    compaction: Mapping[str, Any] = field(default_factory=dict)
    """The merged ``[compaction]`` tables, checked by ``CompactionSettings.from_mapping``."""
    retention: Mapping[str, Any] = field(default_factory=dict)
    """The merged ``[retention]`` tables, checked by ``RetentionSettings.from_mapping``."""
    telemetry: Mapping[str, Any] = field(default_factory=dict)
    """The merged ``[telemetry]`` tables, checked by ``TelemetrySettings.from_mapping``."""
    agents: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    """The merged ``[agents.NAME]`` tables (sub-agents), checked by
    ``SubAgent.from_mapping``."""
    webhooks: Mapping[str, Any] = field(default_factory=dict)
    """``[webhooks.NAME]`` tables by name (project over user, whole tables), checked by
    :func:`plait.domain.webhooks.configured_endpoints`."""
    mcp: Mapping[str, Any] = field(default_factory=dict)
    """The ``[mcp]`` table, ``servers`` merged server by server (project over user),
    checked by :func:`plait.adapters.mcp.servers_from_mapping`."""

    def entry(self, name: str) -> ModelEntry | None:
        return self.models.get(name)


def config_paths(cwd: Path | None, env: Mapping[str, str]) -> list[Path]:
    """Files read, lowest precedence first (missing files are skipped); ``cwd``: the
    project (default the working directory), ``env``: where ``XDG_CONFIG_HOME`` and
    ``HOME`` are looked up."""
    base = env.get("XDG_CONFIG_HOME") or str(Path(env.get("HOME", "~")).expanduser() / ".config")
    return [Path(base) / "plait" / "config.toml", (cwd or Path.cwd()) / "plait.toml"]


def _check(source: str, where: str, key: str, value: object) -> None:
    expected: type | tuple[type, ...]
    if key in _BOOL:
        expected = bool
    elif key in _INT:
        expected = int
    elif key in _FLOAT:
        expected = (int, float)
    elif key in _STR:
        expected = str
    else:
        known = ", ".join((*_STR, *_BOOL, *_INT, *_FLOAT))
        raise ConfigError(
            f"{source}: unknown key {key!r} in {where}; known keys: {known}",
            file=source,
            key=key,
        )
    if not isinstance(value, expected) or (expected is int and isinstance(value, bool)):
        raise ConfigError(
            f"{source}: {where}.{key} has the wrong type ({type(value).__name__})",
            file=source,
            key=key,
        )


def _entry(source: str, name: str, table: object, base: ModelEntry | None) -> ModelEntry:
    where = f"[models.{name}]"
    if not isinstance(table, dict):
        raise ConfigError(f"{source}: {where} must be a table", file=source, key=name)
    for key, value in table.items():
        _check(source, where, key, value)
    settings = {k: v for k, v in table.items() if k not in _STR}
    if base is not None:
        settings = {**base.settings, **settings}
    return ModelEntry(
        name=name,
        source=source,
        spec=table.get("spec", base.spec if base else None),
        base_url=table.get("base_url", base.base_url if base else None),
        key_env=table.get("key_env", base.key_env if base else None),
        settings=settings,
    )


def load_config(cwd: Path | None, env: Mapping[str, str]) -> Config:
    """Read and merge the config files (project over user), then ``PLAIT_MODEL`` of
    ``env``. Called by :func:`plait.settings.resolve_settings`, which passes the process
    environment."""
    model: str | None = None
    policy: str | None = None
    models: dict[str, ModelEntry] = {}
    sources: list[str] = []
    sandbox: dict[str, Any] = {}
    compaction: dict[str, Any] = {}
    retention: dict[str, Any] = {}
    telemetry: dict[str, Any] = {}
    agents: dict[str, dict[str, Any]] = {}
    webhooks: dict[str, Any] = {}
    mcp_servers: dict[str, Any] = {}
    for path in config_paths(cwd, env):
        if not path.is_file():
            continue
        # lazy: tomllib (~3 ms), only when a config file exists: `plait --help`, `import
        # plait.settings` and a Runtime.open() without config files parse no TOML
        import tomllib

        source = str(path)
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
        except (OSError, tomllib.TOMLDecodeError) as error:
            raise ConfigError(f"{source}: cannot read it: {error}", file=source) from error
        sources.append(source)
        for key in data:
            if key not in _TOP:
                raise ConfigError(
                    f"{source}: unknown top-level key {key!r}; known: model, policy, "
                    "[models.NAME], "
                    "[sandbox], [compaction], [retention], [telemetry], [agents.NAME], "
                    "[webhooks.NAME], [mcp.servers.NAME]",
                    file=source,
                    key=key,
                )
        if "model" in data:
            if not isinstance(data["model"], str):
                raise ConfigError(f"{source}: model must be a string", file=source, key="model")
            model = data["model"]
        if "policy" in data:
            if not isinstance(data["policy"], str) or not data["policy"]:
                raise ConfigError(
                    f"{source}: policy must be a file name (a string), relative to {source}",
                    file=source,
                    key="policy",
                )
            policy = str(path.parent / Path(data["policy"]).expanduser())
        tables = data.get("models", {})
        if not isinstance(tables, dict):
            raise ConfigError(f"{source}: models must be a table", file=source, key="models")
        for name, table in tables.items():
            models[name] = _entry(source, name, table, models.get(name))
        if not isinstance(data.get("sandbox", {}), dict):
            raise ConfigError(f"{source}: sandbox must be a table", file=source, key="sandbox")
        sandbox.update(data.get("sandbox", {}))
        if not isinstance(data.get("compaction", {}), dict):
            raise ConfigError(
                f"{source}: compaction must be a table", file=source, key="compaction"
            )
        compaction.update(data.get("compaction", {}))
        if not isinstance(data.get("retention", {}), dict):
            raise ConfigError(f"{source}: retention must be a table", file=source, key="retention")
        retention.update(data.get("retention", {}))
        if not isinstance(data.get("telemetry", {}), dict):
            raise ConfigError(f"{source}: telemetry must be a table", file=source, key="telemetry")
        telemetry.update(data.get("telemetry", {}))
        tables = data.get("agents", {})
        if not isinstance(tables, dict) or not all(isinstance(t, dict) for t in tables.values()):
            raise ConfigError(
                f"{source}: agents must be tables [agents.NAME]", file=source, key="agents"
            )
        for name, table in tables.items():
            agents.setdefault(name, {}).update(table)
        if not isinstance(data.get("webhooks", {}), dict):
            raise ConfigError(f"{source}: webhooks must be a table", file=source, key="webhooks")
        webhooks.update({name: (source, t) for name, t in data.get("webhooks", {}).items()})
        mcp = data.get("mcp", {})
        if not isinstance(mcp, dict) or not isinstance(mcp.get("servers", {}), dict):
            raise ConfigError(f"{source}: mcp.servers must be a table", file=source, key="mcp")
        unknown = sorted(set(mcp) - {"servers"})
        if unknown:
            raise ConfigError(
                f"{source}: unknown key {unknown[0]!r} in [mcp]; known: [mcp.servers.NAME]",
                file=source,
                key=unknown[0],
            )
        mcp_servers.update(mcp.get("servers", {}))
    return Config(
        model=env.get("PLAIT_MODEL") or model,
        policy=policy,
        models=models,
        sources=tuple(sources),
        sandbox=sandbox,
        compaction=compaction,
        retention=retention,
        telemetry=telemetry,
        agents=agents,
        webhooks=webhooks,
        mcp={"servers": mcp_servers} if mcp_servers else {},
    )
