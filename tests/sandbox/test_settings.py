"""SandboxSettings from a [sandbox] table: every key, and clear errors for bad ones."""

from __future__ import annotations

from typing import Any

import pytest

from plait.adapters.tools import Limits, SandboxSettings
from plait.domain.errors import ConfigError
from plait.domain.tools import EffectClass


def test_defaults_are_safe() -> None:
    s = SandboxSettings()
    assert s.network is False
    assert s.allow_unsandboxed is False
    assert s.network_for("run_command") is False
    assert s.limits == Limits()
    assert s.limits.cpu_seconds and s.limits.address_space_bytes and s.limits.max_processes
    assert "OPENAI_API_KEY" not in s.env_allow


def test_from_mapping_reads_every_key() -> None:
    table: dict[str, Any] = {
        "network": False,
        "allow_unsandboxed": True,
        "ro_binds": ["/opt/tools"],
        "rw_binds": ["/var/cache/build"],
        "read_only": ["deploy/**"],
        "hidden": ["secrets/**", "/srv/data"],
        "env": ["LANG", "CI"],
        "set_env": {"PYTHONDONTWRITEBYTECODE": "1"},
        "path": "/opt/tools/bin:/usr/bin:/bin",
        "timeout_seconds": 30,
        "max_timeout_seconds": 300,
        "cpu_seconds": 60,
        "address_space_bytes": 2147483648,
        "max_processes": 128,
        "file_size_bytes": 1048576,
        "test_command": "uv run pytest -q",
        "effects": {"git status": "read_only"},
        "tools": {"run_tests": {"network": True}},
        "bwrap": "/usr/bin/bwrap",
    }
    s = SandboxSettings.from_mapping(table)
    assert s == SandboxSettings(
        network=False,
        allow_unsandboxed=True,
        extra_ro_binds=("/opt/tools",),
        extra_rw_binds=("/var/cache/build",),
        read_only_paths=("deploy/**",),
        hidden_paths=("secrets/**", "/srv/data"),
        env_allow=("LANG", "CI"),
        env_set={"PYTHONDONTWRITEBYTECODE": "1"},
        path="/opt/tools/bin:/usr/bin:/bin",
        timeout_seconds=30,
        max_timeout_seconds=300,
        limits=Limits(
            cpu_seconds=60,
            address_space_bytes=2147483648,
            max_processes=128,
            file_size_bytes=1048576,
        ),
        test_command="uv run pytest -q",
        command_effects={"git status": EffectClass.READ_ONLY},
        tool_network={"run_tests": True},
        bwrap="/usr/bin/bwrap",
    )
    assert s.network_for("run_tests") is True
    assert s.network_for("run_command") is False


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ({"netwrok": True}, "unknown sandbox setting 'netwrok'"),
        ({"network": "yes"}, "'network' must be true or false"),
        ({"ro_binds": "/opt"}, "'ro_binds' must be a list of strings"),
        ({"rw_binds": ["relative/dir"]}, "'extra_rw_binds' must hold absolute paths"),
        ({"cpu_seconds": 0}, "'cpu_seconds' must be a positive integer"),
        ({"max_processes": 1.5}, "'max_processes' must be a positive integer"),
        ({"timeout_seconds": -1}, "'timeout_seconds' must be a positive number"),
        ({"env": ["BAD NAME"]}, "invalid variable name 'BAD NAME'"),
        ({"set_env": {"A": 1}}, "'set_env' must be a table of strings"),
        ({"effects": {"make": "harmless"}}, "use one of"),
        ({"tools": {"run_everything": {"network": True}}}, "unknown tool 'run_everything'"),
        ({"tools": {"run_tests": {"network": True, "x": 1}}}, "may only set network"),
        ({"tools": {"run_tests": {"network": "on"}}}, "must be true or false"),
        ({"test_command": "  "}, "'test_command' must not be empty"),
        ({"path": 3}, "'path' must be a string"),
    ],
)
def test_bad_tables_name_the_key(table: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        SandboxSettings.from_mapping(table)


def test_table_must_be_a_mapping() -> None:
    with pytest.raises(ConfigError, match="must be a table"):
        SandboxSettings.from_mapping(["network"])  # type: ignore[arg-type]
