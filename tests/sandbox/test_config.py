"""The [sandbox] table of plait.toml reaches the session's run_command."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from plait.adapters.tools import SandboxSettings
from plait.domain.errors import ConfigError
from plait.runtime import Runtime
from plait.settings import resolve_settings


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    user = tmp_path / "xdg" / "plait"
    user.mkdir(parents=True)
    (user / "config.toml").write_text("[sandbox]\ntimeout_seconds = 30\nnetwork = true\n")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv("PLAIT_MODEL", raising=False)
    monkeypatch.delenv("PLAIT_POLICY", raising=False)
    proj = tmp_path / "proj"
    proj.mkdir()
    monkeypatch.chdir(proj)
    return proj


def test_tables_merge_project_over_user(project: Path) -> None:
    (project / "plait.toml").write_text('[sandbox]\nnetwork = false\ntest_command = "true"\n')
    config = resolve_settings().config
    assert dict(config.sandbox) == {"timeout_seconds": 30, "network": False, "test_command": "true"}
    settings = SandboxSettings.from_mapping(config.sandbox)
    assert settings.timeout_seconds == 30
    assert settings.network is False


def test_runtime_gives_sessions_the_configured_tools(project: Path, tmp_path: Path) -> None:
    (project / "plait.toml").write_text('[sandbox]\ntest_command = "pytest -q"\n')
    rt = Runtime.open(db=f"sqlite:///{tmp_path / 'plait.db'}", model=None)
    names = {t.spec.name for t in rt.tools}
    asyncio.run(rt.close())
    assert {"run_command", "run_tests"} <= names


def test_a_bad_table_names_the_file_and_key(project: Path, tmp_path: Path) -> None:
    (project / "plait.toml").write_text("[sandbox]\nnetwrok = true\n")
    with pytest.raises(ConfigError, match=r"plait\.toml: \[sandbox\]: unknown sandbox setting"):
        Runtime.open(db=f"sqlite:///{tmp_path / 'plait.db'}", model=None)
    (project / "plait.toml").write_text('sandbox = "on"\n')
    with pytest.raises(ConfigError, match="sandbox must be a table"):
        resolve_settings()
