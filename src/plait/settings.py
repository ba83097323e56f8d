"""Settings, resolved once at the composition root and passed down.

:func:`resolve_settings` reads, in increasing precedence: the defaults, the config files
(:mod:`plait.config`: ``~/.config/plait/config.toml``, then ``plait.toml``), the
environment (``PLAIT_*``), then the flags given to it. Nothing below the root reads a
config file or the environment: adapters get what they need from the :class:`Settings`
value (the process environment reaches them only as :attr:`Settings.environ`, the lookup
of secrets by name: API keys, webhook secrets, MCP ``env_from``, ``OTEL_*``).

The service processes (``plait serve``, ``plait worker``) also resolve
:class:`ServiceSettings` (``service=True``); the variables are listed in
:data:`SERVICE_ENV_HELP`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import field, fields, replace
from pathlib import Path
from types import MappingProxyType

from plait.config import Config, load_config
from plait.domain.errors import ConfigError
from plait.domain.record import record
from plait.domain.webhook_schedule import PAUSE_AFTER, RETRY_SECONDS

__all__ = [
    "SERVICE_ENV_HELP",
    "ServiceSettings",
    "Settings",
    "data_dir",
    "resolve_settings",
    "store_is_shared",
]

SERVICE_ENV_HELP = """\
=========================  ==========================================================
``PLAIT_DB``               store URL (``postgresql://...`` to share it across machines)
``PLAIT_HOST``             address to listen on (default ``127.0.0.1``)
``PLAIT_PORT``             port (default ``8000``)
``PLAIT_MODEL``            model spec the workers use (``scripted:PATH``, ...)
``PLAIT_SERVE_WORKERS``    runs the API process drives itself (default 4 for SQLite and
                           memory stores, 0 for PostgreSQL: run ``plait worker`` there)
``PLAIT_WORKER_CONCURRENCY``  runs one ``plait worker`` drives at once (default 4)
``PLAIT_LEASE_SECONDS``    run lease (default 60); a dead worker's run is recovered after
``PLAIT_GRACE_SECONDS``    on SIGTERM, how long in-flight runs may finish (default 30)
``PLAIT_EVENT_POLL_SECONDS``  how often event streams poll the store while live
                           notifications are unavailable (PostgreSQL listener down;
                           default 0.5)
``PLAIT_MAX_BODY_BYTES``   largest request body (default 1000000)
``PLAIT_WORKSPACE_ROOT``   directory under which each principal's sessions name workspaces
``PLAIT_LOG_LEVEL``        ``debug``, ``info`` (default), ``warning``, ``error``
``PLAIT_WEBHOOK_RETRY_SECONDS``  waits between webhook attempts, comma-separated
                           (default 5,30,120,600,3600,10800,21600,43200; +0-20% jitter)
``PLAIT_WEBHOOK_LEASE_SECONDS``  a delivery's lease: a killed worker's is resent after
                           (default 60)
``PLAIT_WEBHOOK_TIMEOUT_SECONDS``  one webhook POST (default 10)
``PLAIT_WEBHOOK_POLL_SECONDS``  how often idle workers look for due deliveries (default 1)
``PLAIT_WEBHOOK_PAUSE_AFTER``  consecutive failures that pause an endpoint (default 20)
``PLAIT_WEBHOOK_PRIVATE_NETWORKS``  ``deny`` (default): a principal's webhooks reach
                           only public addresses; ``allow``: private networks too (an
                           operator's endpoints are never restricted)
=========================  ==========================================================
"""


@record(kw_only=True)
class ServiceSettings:
    """What ``plait serve`` and ``plait worker`` run with (see :data:`SERVICE_ENV_HELP`)."""

    db: str
    host: str = "127.0.0.1"
    port: int = 8000
    model: str | None = None
    serve_workers: int = 0
    worker_concurrency: int = 4
    lease_seconds: float = 60.0
    grace_seconds: float = 30.0
    event_poll_seconds: float = 0.5
    max_body_bytes: int = 1_000_000
    workspace_root: Path | None = None
    log_level: str = "info"
    webhook_retry_seconds: tuple[float, ...] = RETRY_SECONDS
    webhook_lease_seconds: float = 60.0
    webhook_timeout_seconds: float = 10.0
    webhook_poll_seconds: float = 1.0
    webhook_pause_after: int = PAUSE_AFTER
    webhook_private_networks: bool = False
    """Whether a principal's webhooks may reach private networks
    (``PLAIT_WEBHOOK_PRIVATE_NETWORKS``)."""


@record(kw_only=True)
class Settings:
    """Everything a process was configured with, resolved once (see the module's doc)."""

    db: str
    """The store URL (``--db``, ``PLAIT_DB``, else ``plait.db`` in :attr:`data_dir`)."""
    model: str | None = None
    """The model spec (``--model``, ``PLAIT_MODEL``, the files' ``model``; ``None``: none)."""
    policy: str | None = None
    """The policy file (``--policy``, ``PLAIT_POLICY``, the files' ``policy``; ``None``: the
    built-in default)."""
    data_dir: Path
    """Where plait keeps its data (:func:`data_dir`)."""
    config: Config = field(default_factory=Config)
    """The config files' tables (sandbox, compaction, agents, mcp, ...), checked where
    each is turned into its typed settings."""
    environ: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    """The process environment, read-only: where secrets named in the settings are
    looked up (model API keys, ``key_env``, webhook ``secret_env``, MCP ``env_from``,
    ``OTEL_*``)."""
    service: ServiceSettings | None = None
    """The service processes' settings (``None`` unless resolved with ``service=True``)."""

    @property
    def worktrees_dir(self) -> Path:
        """Where fork snapshots' worktrees go: never inside a workspace."""
        return self.data_dir / "worktrees"


def data_dir(env: Mapping[str, str]) -> Path:
    """``$XDG_DATA_HOME/plait``, else ``~/.local/share/plait`` (outside any project, so
    out of the agent's reach)."""
    base = env.get("XDG_DATA_HOME") or ""
    home = Path(env["HOME"]) if env.get("HOME") else Path.home()
    root = Path(base) if os.path.isabs(base) else home / ".local" / "share"
    return root / "plait"


def store_is_shared(url: str) -> bool:
    """Whether ``url`` names a store processes on several machines share (PostgreSQL)."""
    # lazy: `plait --help` loads the settings but not the store package (~1 ms, 1 module)
    from plait.adapters.stores import store_kind

    return store_kind(url) == "postgres"


def resolve_settings(
    *,
    db: str | None = None,
    model: str | None = None,
    policy: str | None = None,
    service: Mapping[str, object] | None = None,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
) -> Settings:
    """The settings: defaults, then the config files, then the environment, then the
    flags given here (``None``: not given). ``service``: the service processes' flags
    (``{}`` for none); without it :attr:`Settings.service` stays ``None``. ``env``
    defaults to the process environment: the one place plait reads it. A bad value is a
    ConfigError naming the key and where it came from."""
    environ = MappingProxyType(dict(os.environ if env is None else env))
    config = load_config(cwd, environ)
    home = data_dir(environ)
    url = db or environ.get("PLAIT_DB") or f"sqlite:///{home / 'plait.db'}"
    chosen = model or config.model  # the files' model, PLAIT_MODEL over it (load_config)
    settings = Settings(
        db=url,
        model=chosen or None,
        policy=policy or environ.get("PLAIT_POLICY") or config.policy or None,
        data_dir=home,
        config=config,
        environ=environ,
    )
    if service is None:
        return settings
    return replace(settings, service=_service(settings, service))


def _service(settings: Settings, flags: Mapping[str, object]) -> ServiceSettings:
    env = settings.environ
    level = env.get("PLAIT_LOG_LEVEL", "info").lower()
    if level not in ("debug", "info", "warning", "error"):
        raise ConfigError(
            f"environment variable PLAIT_LOG_LEVEL must be debug, info, warning or error: "
            f"{level!r}",
            name="PLAIT_LOG_LEVEL",
            source="environment",
        )
    root = env.get("PLAIT_WORKSPACE_ROOT")
    base = ServiceSettings(
        db=settings.db,
        host=env.get("PLAIT_HOST", "127.0.0.1"),
        port=_int(env, "PLAIT_PORT", 8000),
        model=settings.model,
        serve_workers=_int(env, "PLAIT_SERVE_WORKERS", 0 if store_is_shared(settings.db) else 4),
        worker_concurrency=_int(env, "PLAIT_WORKER_CONCURRENCY", 4, low=1),
        lease_seconds=_float(env, "PLAIT_LEASE_SECONDS", 60.0),
        grace_seconds=_float(env, "PLAIT_GRACE_SECONDS", 30.0),
        event_poll_seconds=_float(env, "PLAIT_EVENT_POLL_SECONDS", 0.5),
        max_body_bytes=_int(env, "PLAIT_MAX_BODY_BYTES", 1_000_000, low=1024),
        workspace_root=Path(root) if root else None,
        log_level=level,
        webhook_retry_seconds=_floats(env, "PLAIT_WEBHOOK_RETRY_SECONDS", RETRY_SECONDS),
        webhook_lease_seconds=_float(env, "PLAIT_WEBHOOK_LEASE_SECONDS", 60.0),
        webhook_timeout_seconds=_float(env, "PLAIT_WEBHOOK_TIMEOUT_SECONDS", 10.0),
        webhook_poll_seconds=_float(env, "PLAIT_WEBHOOK_POLL_SECONDS", 1.0),
        webhook_pause_after=_int(env, "PLAIT_WEBHOOK_PAUSE_AFTER", PAUSE_AFTER, low=1),
        webhook_private_networks=_choice(env, "PLAIT_WEBHOOK_PRIVATE_NETWORKS", ("deny", "allow"))
        == "allow",
    )
    names = {f.name for f in fields(ServiceSettings)} - {"db", "model"}
    given = {name: value for name, value in flags.items() if name in names and value is not None}
    current = {f.name: getattr(base, f.name) for f in fields(ServiceSettings)}
    return ServiceSettings(**{**current, **given})


def _bad(name: str, what: str) -> ConfigError:
    return ConfigError(
        f"environment variable {name} must be {what}", name=name, source="environment"
    )


def _choice(env: Mapping[str, str], name: str, choices: tuple[str, ...]) -> str:
    """``name``'s value, one of ``choices`` (the first is the default)."""
    value = env.get(name, choices[0]).strip().lower() or choices[0]
    if value not in choices:
        raise _bad(name, " or ".join(choices))
    return value


def _int(env: Mapping[str, str], name: str, default: int, low: int = 0) -> int:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise _bad(name, f"a whole number, got {raw!r}") from None
    if value < low:
        raise _bad(name, f"at least {low}, got {value}")
    return value


def _float(env: Mapping[str, str], name: str, default: float) -> float:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        raise _bad(name, f"a number, got {raw!r}") from None
    if value <= 0:
        raise _bad(name, f"positive, got {value}")
    return value


def _floats(env: Mapping[str, str], name: str, default: tuple[float, ...]) -> tuple[float, ...]:
    raw = env.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        values = tuple(float(part) for part in raw.split(","))
    except ValueError:
        raise _bad(name, f"comma-separated numbers of seconds, got {raw!r}") from None
    if any(value < 0 for value in values):
        raise ConfigError(
            f"environment variable {name} may not hold negative waits, got {raw!r}",
            name=name,
            source="environment",
        )
    return values
