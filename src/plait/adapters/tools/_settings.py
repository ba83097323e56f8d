"""Sandbox settings: what a command may see, touch and use, with safe defaults.

Built in code (``SandboxSettings(...)``) or from a ``[sandbox]`` table of the config or
policy file (:meth:`SandboxSettings.from_mapping`); unknown keys and bad values are refused
with a message naming the key.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import field, fields
from typing import Any

from plait.domain.errors import ConfigError
from plait.domain.record import record
from plait.domain.tools import EffectClass

__all__ = ["DEFAULT_ENV_ALLOW", "Limits", "SandboxSettings"]

DEFAULT_ENV_ALLOW = ("LANG", "LC_ALL", "LC_CTYPE", "TERM", "TZ")
"""Variables passed through from plait's own environment by default: none can hold a
credential. Everything else is dropped (``PATH``, ``HOME`` and ``TMPDIR`` are set)."""

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_GIB = 1024**3


def _bad(key: str, why: str) -> ConfigError:
    return ConfigError(f"sandbox setting {key!r} {why}", key=key)


def _positive(key: str, value: object, *, integer: bool) -> None:
    kinds: tuple[type, ...] = (int,) if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, kinds) or value <= 0:  # type: ignore[operator]
        kind = "a positive integer" if integer else "a positive number"
        raise _bad(key, f"must be {kind} (got {value!r})")


def _strings(key: str, value: object) -> tuple[str, ...]:
    if isinstance(value, str) or not isinstance(value, list | tuple):
        raise _bad(key, f"must be a list of strings (got {value!r})")
    if not all(isinstance(v, str) and v for v in value):
        raise _bad(key, f"must be a list of non-empty strings (got {value!r})")
    return tuple(value)


@record(kw_only=True)
class Limits:
    """Resource limits of one command. ``None`` leaves a limit off.

    ``cpu_seconds`` and ``address_space_bytes`` are rlimits of every process in the
    sandbox. ``max_processes`` is enforced with a pids cgroup where plait may create one
    (root with a writable ``pids`` controller), else with ``RLIMIT_NPROC`` counted on top
    of the processes the user already runs; a process running as root with no cgroup is
    not limited, and the result says so.
    """

    cpu_seconds: int | None = 600
    address_space_bytes: int | None = 8 * _GIB
    max_processes: int | None = 512
    file_size_bytes: int | None = None

    def __post_init__(self) -> None:
        for setting in fields(self):
            value = getattr(self, setting.name)
            if value is not None:
                _positive(setting.name, value, integer=True)


_BOOL_KEYS = ("network", "allow_unsandboxed")
_LIST_KEYS = {
    "ro_binds": "extra_ro_binds",
    "rw_binds": "extra_rw_binds",
    "read_only": "read_only_paths",
    "hidden": "hidden_paths",
    "env": "env_allow",
}
_NUMBER_KEYS = ("timeout_seconds", "max_timeout_seconds")
_LIMIT_KEYS = ("cpu_seconds", "address_space_bytes", "max_processes", "file_size_bytes")


@record(kw_only=True)
class SandboxSettings:
    """How ``run_command`` and ``run_tests`` run.

    Paths: ``extra_ro_binds``/``extra_rw_binds`` are absolute host paths made visible at
    the same place (read-only / read-write). ``read_only_paths`` are globs relative to the
    workspace (``deploy/**``, ``*.lock``) bound read-only over the writable workspace;
    ``hidden_paths`` are such globs or absolute paths made invisible (an empty directory
    or an unreadable file in their place). plait adds its own store and artifact paths.
    """

    network: bool = False
    tool_network: Mapping[str, bool] = field(default_factory=dict)
    """Per tool (``run_command``, ``run_tests``): overrides ``network``."""
    extra_ro_binds: tuple[str, ...] = ()
    extra_rw_binds: tuple[str, ...] = ()
    read_only_paths: tuple[str, ...] = ()
    hidden_paths: tuple[str, ...] = ()
    limits: Limits = field(default_factory=Limits)
    timeout_seconds: float = 120.0
    """Wall-clock timeout when the call gives none."""
    max_timeout_seconds: float = 1800.0
    """The most a call may ask for."""
    env_allow: tuple[str, ...] = DEFAULT_ENV_ALLOW
    env_set: Mapping[str, str] = field(default_factory=dict)
    path: str = "/usr/local/bin:/usr/bin:/bin"
    """``PATH`` inside the sandbox."""
    allow_unsandboxed: bool = False
    """Run without bubblewrap when it is unusable (every such result is marked)."""
    test_command: str | None = None
    """What ``run_tests`` runs; without one there is no ``run_tests`` tool."""
    command_effects: Mapping[str, EffectClass] = field(default_factory=dict)
    """Effect class of exact command strings; others are side effects, except the test
    command, which is idempotent unless listed here."""
    bwrap: str = "bwrap"

    def __post_init__(self) -> None:
        for key in _BOOL_KEYS:
            if not isinstance(getattr(self, key), bool):
                raise _bad(key, "must be true or false")
        for name, value in self.tool_network.items():
            if not isinstance(value, bool):
                raise _bad(f"tools.{name}.network", "must be true or false")
        for key in ("extra_ro_binds", "extra_rw_binds"):
            for pattern in getattr(self, key):
                if not pattern.startswith("/"):
                    raise _bad(key, f"must hold absolute paths (got {pattern!r})")
        for key in _NUMBER_KEYS:
            _positive(key, getattr(self, key), integer=False)
        for name in (*self.env_allow, *self.env_set):
            if not _ENV_NAME.match(name):
                raise _bad("env", f"has an invalid variable name {name!r}")
        if self.test_command is not None and not self.test_command.strip():
            raise _bad("test_command", "must not be empty")
        object.__setattr__(
            self,
            "command_effects",
            {k.strip(): EffectClass(v) for k, v in self.command_effects.items()},
        )

    def network_for(self, tool: str) -> bool:
        return self.tool_network.get(tool, self.network)

    def effect_of(self, command: str) -> EffectClass:
        """The configured effect class of ``command``; unknown commands are side effects."""
        key = command.strip()
        if key in self.command_effects:
            return self.command_effects[key]
        if self.test_command is not None and key == self.test_command.strip():
            return EffectClass.IDEMPOTENT
        return EffectClass.SIDE_EFFECT

    @classmethod
    def from_mapping(cls, table: Mapping[str, Any]) -> SandboxSettings:
        """Settings from a ``[sandbox]`` table (see the README for every key)."""
        if not isinstance(table, Mapping):
            raise ConfigError("the [sandbox] table must be a table of settings")
        known = {
            *_BOOL_KEYS,
            *_LIST_KEYS,
            *_NUMBER_KEYS,
            *_LIMIT_KEYS,
            "tools",
            "set_env",
            "path",
            "test_command",
            "effects",
            "bwrap",
        }
        unknown = sorted(set(table) - known)
        if unknown:
            raise ConfigError(
                f"unknown sandbox setting {unknown[0]!r}; known settings: "
                + ", ".join(sorted(known)),
                key=unknown[0],
            )
        kw: dict[str, Any] = {k: table[k] for k in (*_BOOL_KEYS, *_NUMBER_KEYS) if k in table}
        kw |= {attr: _strings(k, table[k]) for k, attr in _LIST_KEYS.items() if k in table}
        for key in ("path", "test_command", "bwrap"):
            if key in table:
                if not isinstance(table[key], str):
                    raise _bad(key, f"must be a string (got {table[key]!r})")
                kw[key] = table[key]
        kw["limits"] = Limits(**{k: table[k] for k in _LIMIT_KEYS if k in table})
        kw["tool_network"] = _tool_network(table.get("tools", {}))
        kw["env_set"] = _str_table("set_env", table.get("set_env", {}))
        kw["command_effects"] = _effects(table.get("effects", {}))
        return cls(**kw)


def _str_table(key: str, value: object) -> dict[str, str]:
    if not isinstance(value, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise _bad(key, "must be a table of strings")
    return dict(value)


def _effects(value: object) -> dict[str, EffectClass]:
    table = _str_table("effects", value)
    allowed = [e.value for e in EffectClass]
    for command, effect in table.items():
        if effect not in allowed:
            raise _bad("effects", f"gives {command!r} the effect {effect!r}; use one of {allowed}")
    return {k: EffectClass(v) for k, v in table.items()}


def _tool_network(value: object) -> dict[str, bool]:
    if not isinstance(value, Mapping):
        raise _bad("tools", "must be a table like {run_tests = {network = true}}")
    out: dict[str, bool] = {}
    for name, sub in value.items():
        if name not in ("run_command", "run_tests"):
            raise _bad("tools", f"names an unknown tool {name!r} (run_command, run_tests)")
        if not isinstance(sub, Mapping) or set(sub) - {"network"}:
            raise _bad(f"tools.{name}", "may only set network = true/false")
        if "network" in sub:
            out[name] = sub["network"]
    return out
