"""``[mcp.servers.NAME]`` tables: how to reach one MCP server and how far to trust it."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import field
from typing import Any

from plait.domain.errors import ConfigError
from plait.domain.record import record
from plait.domain.tools import EffectClass

__all__ = ["McpServerConfig", "servers_from_mapping"]

_SERVER_NAME = re.compile(r"^[A-Za-z0-9_-]{1,32}$")
_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
_STDIO_KEYS = ("command", "args", "env", "env_from", "cwd", "sandbox", "network", "ro_binds")
_HTTP_KEYS = ("url", "headers")
_KEYS = (*_STDIO_KEYS, *_HTTP_KEYS, "timeout_seconds", "startup_seconds", "effects", "destructive")


@record(kw_only=True)
class McpServerConfig:
    """One server. Stdio (``command``) or streamable HTTP (``url``), never both.

    ``effects`` maps tool-name globs to an effect class and overrides the server's
    annotations (hints from a server the user may not control); ``destructive`` does the
    same for ``destructiveHint`` (glob → bool)."""

    name: str
    command: str | None = None
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    """Literal values, passed to the server (and only these, plus the sandbox's own)."""
    env_from: Mapping[str, str] = field(default_factory=dict)
    """Server variable → plait's environment variable it is copied from (secrets)."""
    cwd: str | None = None
    """Relative to the workspace (default: the workspace root)."""
    url: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    """Values may name environment variables as ``${NAME}`` (resolved when connecting)."""
    sandbox: bool = True
    network: bool = False
    ro_binds: tuple[str, ...] = ()
    """Host paths the sandboxed server may read (its installation, its interpreter)."""
    timeout_seconds: float = 60.0
    startup_seconds: float = 30.0
    effects: Mapping[str, EffectClass] = field(default_factory=dict)
    destructive: Mapping[str, bool] = field(default_factory=dict)

    @property
    def transport(self) -> str:
        return "stdio" if self.command is not None else "http"

    def resolved_headers(self, environ: Mapping[str, str]) -> dict[str, str]:
        """The headers with ``${NAME}`` replaced; a missing variable is a ConfigError."""

        def value(match: re.Match[str]) -> str:
            var = match.group(1)
            if var not in environ:
                raise ConfigError(
                    f"MCP server {self.name!r}: header needs the environment variable {var}, "
                    "which is not set",
                    server=self.name,
                    variable=var,
                )
            return environ[var]

        return {k: _ENV_REF.sub(value, v) for k, v in self.headers.items()}

    def resolved_env(self, environ: Mapping[str, str]) -> dict[str, str]:
        env = dict(self.env)
        for target, var in self.env_from.items():
            if var not in environ:
                raise ConfigError(
                    f"MCP server {self.name!r}: env_from needs the environment variable "
                    f"{var}, which is not set",
                    server=self.name,
                    variable=var,
                )
            env[target] = environ[var]
        return env

    @classmethod
    def from_mapping(cls, name: str, table: Mapping[str, Any]) -> McpServerConfig:
        where = f"[mcp.servers.{name}]"
        if not _SERVER_NAME.match(name):
            raise ConfigError(
                f"{where}: a server name is 1-32 letters, digits, '_' or '-'", server=name
            )
        unknown = sorted(set(table) - set(_KEYS))
        if unknown:
            raise ConfigError(
                f"{where}: unknown key {unknown[0]!r}; known keys: {', '.join(_KEYS)}",
                server=name,
                key=unknown[0],
            )
        if ("command" in table) == ("url" in table):
            raise ConfigError(f"{where}: set exactly one of command (stdio) or url (HTTP)")
        kw: dict[str, Any] = {"name": name}
        for key in ("command", "cwd", "url"):
            if key in table:
                kw[key] = _typed(where, key, table[key], str)
        for key in ("sandbox", "network"):
            if key in table:
                kw[key] = _typed(where, key, table[key], bool)
        for key in ("timeout_seconds", "startup_seconds"):
            if key in table:
                number = _typed(where, key, table[key], (int, float))
                if isinstance(number, bool) or number <= 0:
                    raise ConfigError(f"{where}: {key} must be a positive number", key=key)
                kw[key] = float(number)
        for key in ("args", "ro_binds"):
            if key in table:
                kw[key] = tuple(_strings(where, key, table[key]))
        for key in ("env", "env_from", "headers"):
            if key in table:
                kw[key] = _str_table(where, key, table[key])
        if "effects" in table:
            try:
                kw["effects"] = {
                    k: EffectClass(v)
                    for k, v in _str_table(where, "effects", table["effects"]).items()
                }
            except ValueError as exc:
                raise ConfigError(
                    f"{where}: effects values are read_only, idempotent or side_effect",
                    key="effects",
                ) from exc
        if "destructive" in table:
            raw = table["destructive"]
            if not isinstance(raw, dict) or not all(isinstance(v, bool) for v in raw.values()):
                raise ConfigError(f"{where}: destructive maps tool globs to true/false")
            kw["destructive"] = dict(raw)
        for path in kw.get("ro_binds", ()):
            if not os.path.isabs(path):
                raise ConfigError(f"{where}: ro_binds entries must be absolute paths: {path!r}")
        return cls(**kw)


def servers_from_mapping(table: Mapping[str, Any]) -> dict[str, McpServerConfig]:
    """The ``[mcp]`` table (``servers`` only) as configs by name."""
    unknown = sorted(set(table) - {"servers"})
    if unknown:
        raise ConfigError(f"[mcp]: unknown key {unknown[0]!r}; known keys: servers")
    servers = table.get("servers", {})
    if not isinstance(servers, dict):
        raise ConfigError("[mcp]: servers must be a table of [mcp.servers.NAME] tables")
    out: dict[str, McpServerConfig] = {}
    for name, server in servers.items():
        if not isinstance(server, dict):
            raise ConfigError(f"[mcp.servers.{name}] must be a table", server=name)
        out[name] = McpServerConfig.from_mapping(name, server)
    return out


def _typed(where: str, key: str, value: object, kind: type | tuple[type, ...]) -> Any:
    if not isinstance(value, kind):
        raise ConfigError(f"{where}: {key} has the wrong type ({type(value).__name__})", key=key)
    return value


def _strings(where: str, key: str, value: object) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{where}: {key} must be a list of strings", key=key)
    return value


def _str_table(where: str, key: str, value: object) -> dict[str, str]:
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise ConfigError(f"{where}: {key} must be a table of strings", key=key)
    return dict(value)
