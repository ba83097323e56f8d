"""Settings are resolved once, at the root: defaults < config files < environment < flags,
and a bad value names its key and where it came from. What is below the root gets them
passed (it reads no config file and no environment of its own)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from plait.adapters.policy_file import policy_from
from plait.domain.errors import ConfigError
from plait.domain.policy import Policy
from plait.runtime import Runtime
from plait.settings import resolve_settings


@pytest.fixture
def dirs(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A project directory and an environment with a home of its own (no user config)."""
    project = tmp_path / "project"
    project.mkdir()
    env = {"HOME": str(tmp_path / "home"), "XDG_CONFIG_HOME": str(tmp_path / "config")}
    return project, env


def test_the_defaults(dirs: tuple[Path, dict[str, str]], tmp_path: Path) -> None:
    project, env = dirs
    settings = resolve_settings(env=env, cwd=project)
    data = tmp_path / "home" / ".local" / "share" / "plait"
    assert settings.model is None and settings.policy is None and settings.service is None
    assert settings.data_dir == data
    assert settings.db == f"sqlite:///{data / 'plait.db'}"
    assert settings.worktrees_dir == data / "worktrees"
    assert settings.config.sources == ()


def test_model_file_under_environment_under_flag(dirs: tuple[Path, dict[str, str]]) -> None:
    project, env = dirs
    user = Path(env["XDG_CONFIG_HOME"]) / "plait"
    user.mkdir(parents=True)
    (user / "config.toml").write_text('model = "scripted:user.yaml"\n', encoding="utf-8")
    assert resolve_settings(env=env, cwd=project).model == "scripted:user.yaml"
    (project / "plait.toml").write_text('model = "scripted:file.yaml"\n', encoding="utf-8")
    assert resolve_settings(env=env, cwd=project).model == "scripted:file.yaml"
    env["PLAIT_MODEL"] = "scripted:env.yaml"
    assert resolve_settings(env=env, cwd=project).model == "scripted:env.yaml"
    flagged = resolve_settings(model="scripted:flag.yaml", env=env, cwd=project)
    assert flagged.model == "scripted:flag.yaml"


def test_store_and_policy_environment_under_flag(dirs: tuple[Path, dict[str, str]]) -> None:
    project, env = dirs
    env |= {"PLAIT_DB": "memory://", "PLAIT_POLICY": "env.toml"}
    settings = resolve_settings(env=env, cwd=project)
    assert (settings.db, settings.policy) == ("memory://", "env.toml")
    flagged = resolve_settings(db="sqlite:///x.db", policy="flag.toml", env=env, cwd=project)
    assert (flagged.db, flagged.policy) == ("sqlite:///x.db", "flag.toml")


def test_service_settings_defaults_environment_flags(dirs: tuple[Path, dict[str, str]]) -> None:
    project, env = dirs
    service = resolve_settings(env=env, cwd=project, service={}).service
    assert service is not None
    assert (service.port, service.serve_workers, service.host) == (8000, 4, "127.0.0.1")
    shared = resolve_settings(db="postgresql://h/db", env=env, cwd=project, service={}).service
    assert shared is not None and shared.serve_workers == 0  # run `plait worker` there
    env |= {"PLAIT_PORT": "9000", "PLAIT_HOST": "0.0.0.0"}
    service = resolve_settings(env=env, cwd=project, service={}).service
    assert service is not None and (service.port, service.host) == (9000, "0.0.0.0")
    flags = {"port": 9100, "host": None, "serve_workers": 2, "unrelated": "x"}
    service = resolve_settings(env=env, cwd=project, service=flags).service
    assert service is not None
    assert (service.port, service.host, service.serve_workers) == (9100, "0.0.0.0", 2)


def test_the_service_gets_the_same_store_and_model(dirs: tuple[Path, dict[str, str]]) -> None:
    project, env = dirs
    (project / "plait.toml").write_text('model = "scripted:file.yaml"\n', encoding="utf-8")
    settings = resolve_settings(db="memory://", env=env, cwd=project, service={})
    assert settings.service is not None
    assert (settings.service.db, settings.service.model) == ("memory://", "scripted:file.yaml")


@pytest.mark.parametrize(
    ("name", "value", "said"),
    [
        ("PLAIT_PORT", "eighty", "a whole number, got 'eighty'"),
        ("PLAIT_MAX_BODY_BYTES", "10", "at least 1024, got 10"),
        ("PLAIT_LEASE_SECONDS", "0", "positive, got 0.0"),
        ("PLAIT_WEBHOOK_RETRY_SECONDS", "5,soon", "comma-separated numbers of seconds"),
        ("PLAIT_LOG_LEVEL", "loud", "debug, info, warning or error"),
    ],
)
def test_a_bad_environment_value_names_the_variable_and_the_environment(
    dirs: tuple[Path, dict[str, str]], name: str, value: str, said: str
) -> None:
    project, env = dirs
    env[name] = value
    assert resolve_settings(env=env, cwd=project).model is None  # only services read them
    with pytest.raises(ConfigError) as raised:
        resolve_settings(env=env, cwd=project, service={})
    assert raised.value.message.startswith(f"environment variable {name} must be")
    assert said in raised.value.message
    assert raised.value.details == {"name": name, "source": "environment"}


def test_a_bad_file_value_names_the_key_and_the_file(dirs: tuple[Path, dict[str, str]]) -> None:
    project, env = dirs
    (project / "plait.toml").write_text("model = 3\n", encoding="utf-8")
    with pytest.raises(ConfigError) as raised:
        resolve_settings(env=env, cwd=project)
    source = str(project / "plait.toml")
    assert raised.value.message == f"{source}: model must be a string"
    assert raised.value.details == {"file": source, "key": "model"}


def test_the_policy_below_the_root_reads_no_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PLAIT_POLICY", str(tmp_path / "missing.toml"))
    assert policy_from(None) == Policy.default()  # the root resolved no policy file


def test_runtime_open_uses_the_settings_it_is_given(
    monkeypatch: pytest.MonkeyPatch, dirs: tuple[Path, dict[str, str]]
) -> None:
    """The model, its key and the store come from the settings passed, not from the
    process environment (which names none of them here, or others)."""
    project, env = dirs
    monkeypatch.setenv("PLAIT_MODEL", "openai:not-this-one")
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    env |= {"OPENAI_API_KEY": "key-from-the-settings"}
    settings = resolve_settings(db="memory://", model="openai:gpt-4o", env=env, cwd=project)
    runtime = Runtime.open(settings=settings, mcp_servers={})
    try:
        assert runtime.service.models.spec == "openai:gpt-4o"
        assert runtime.model is not None and runtime.model.name == "openai:gpt-4o"
        assert runtime.queries.store_info().location == "memory://"
    finally:
        asyncio.run(runtime.close())
    flagged = Runtime.open(db="memory://", settings=settings, store_only=True)
    asyncio.run(flagged.close())


def test_the_policy_file_plait_toml_names_is_relative_to_it(
    dirs: tuple[Path, dict[str, str]],
) -> None:
    project, env = dirs
    (project / "plait.toml").write_text('policy = "rules/p.toml"\n')
    assert resolve_settings(env=env, cwd=project).policy == str(project / "rules" / "p.toml")
    assert resolve_settings(env={**env, "PLAIT_POLICY": "/x.toml"}, cwd=project).policy == "/x.toml"
    assert resolve_settings(env=env, cwd=project, policy="/y.toml").policy == "/y.toml"
    (project / "plait.toml").write_text("policy = 3\n")
    with pytest.raises(ConfigError, match="policy must be a file name") as caught:
        resolve_settings(env=env, cwd=project)
    assert caught.value.details["key"] == "policy"
