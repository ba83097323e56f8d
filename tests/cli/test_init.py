"""``plait init`` (issue 26 item 3): a commented plait.toml every loader accepts, a policy
the policy loader accepts, the model checked when it can be opened, next steps; never an
overwrite without --force."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from plait.adapters.policy_file import load_policy, policy_from
from plait.adapters.tools._settings import SandboxSettings
from plait.config import load_config
from plait.domain.compaction import CompactionSettings
from plait.settings import resolve_settings
from plait.testing.fake_providers import FakeProvider, FakeTurn
from tests.cli.conftest import Plait, write_script


@pytest.fixture
def project(tmp_path: Path) -> Path:
    d = tmp_path / "project"
    d.mkdir()
    return d


def test_init_writes_files_every_loader_accepts(plait: Plait, project: Path) -> None:
    r = plait.raw("init", str(project), "--json")
    assert r.code == 0, r.err
    data = r.json
    assert data["written"] == [
        str((project / "plait.toml").resolve()),
        str((project / "plait-policy.toml").resolve()),
    ]
    assert data["model"] is None and data["model_check"] is None
    assert any("choose a model" in s for s in data["next"])
    text = (project / "plait.toml").read_text(encoding="utf-8")
    for topic in (
        "model",
        "Budgets",
        "--max-steps 50",
        "[compaction]",
        "[sandbox]",
        "[mcp.servers",
    ):
        assert topic in text, topic
    config = load_config(cwd=project, env={"HOME": str(project / "home")})
    assert config.model is None
    assert CompactionSettings.from_mapping(config.compaction) == CompactionSettings()
    assert SandboxSettings.from_mapping(config.sandbox) == SandboxSettings()
    # the commented-out tables are real keys too: uncommented, they load
    tables = "\n".join(
        line.removeprefix("# ")
        for line in text.splitlines()
        if line.startswith(
            ("# [models.", "# spec", "# key_env", "# context_window", "# max_output")
        )
    )
    assert tomllib.loads(tables)["models"]["local"]["context_window"] == 32768
    policy = load_policy(project / "plait-policy.toml")
    assert [rule.name for rule in policy.rules] == ["read-only-commands"]
    assert policy.protect_git and policy.protect_config


def test_the_policy_init_writes_applies_without_an_environment_variable(
    plait: Plait, project: Path
) -> None:
    assert plait.raw("init", str(project)).code == 0
    env = {"HOME": str(project / "home")}
    settings = resolve_settings(env=env, cwd=project)
    assert settings.policy == str(project / "plait-policy.toml")
    assert policy_from(settings.policy).source == str(project / "plait-policy.toml")
    steps = plait.raw("init", str(project), "--force", "--json").json["next"]
    assert not any("PLAIT_POLICY" in step for step in steps)


def test_init_never_overwrites_without_force(plait: Plait, project: Path) -> None:
    (project / "plait.toml").write_text('model = "mine"\n', encoding="utf-8")
    r = plait.raw("init", str(project), "--json")
    assert r.code == 2 and "already in" in r.json["error"]["message"]
    assert (project / "plait.toml").read_text(encoding="utf-8") == 'model = "mine"\n'
    assert not (project / "plait-policy.toml").exists()
    assert plait.raw("init", str(project), "--force").code == 0
    assert "model = " not in (project / "plait.toml").read_text(encoding="utf-8").split("\n# ")[0]


def test_init_with_a_model_checks_it(plait: Plait, project: Path, tmp_path: Path) -> None:
    spec = write_script(
        tmp_path, "ok", {"version": 1, "assistant": [{"text": "ok"}] * 4, "capabilities": {}}
    )
    r = plait.raw("init", str(project), "--model", spec, "--json")
    data = r.json
    assert data["model"] == spec
    assert data["model_check"]["checked"] is True
    assert load_config(cwd=project, env={"HOME": str(project / "h")}).model == spec
    assert r.code == (0 if data["model_check"]["ok"] else 1)


def test_init_with_a_model_whose_key_is_missing(
    plait: Plait, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    r = plait.raw("init", str(project), "--model", "anthropic:claude-haiku-4-5")
    assert r.code == 0, r.err
    assert "not checked" in r.out and "ANTHROPIC_API_KEY" in r.out
    assert (project / "plait.toml").exists()


def test_init_in_a_missing_directory(plait: Plait, tmp_path: Path) -> None:
    r = plait.raw("init", str(tmp_path / "nope"), "--json")
    assert r.code == 2 and "not an existing directory" in r.json["error"]["message"]


def test_init_for_a_model_plait_does_not_know_leaves_compaction_off(
    plait: Plait, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A local OpenAI-compatible model has no known window: with compaction on, the first
    send would be refused (TOKEN_METER_MODEL_UNCONFIGURED); init writes it off and says
    what to declare, and a send in the project then completes."""
    turns = [FakeTurn(text="It is a shop.")] * 6
    with FakeProvider("openai", turns, model="local") as fake:
        spec = f"openai-compatible:{fake.base_url}#local"
        r = plait.raw("init", str(project), "--model", spec, "--json")
        assert r.code in (0, 1), r.err  # the model check may fail: the fake calls no tool
        assert "compaction is off" in r.json["next"][0]
        assert "context window" in r.json["next"][0]
        config = load_config(cwd=project, env={"HOME": str(project / "home")})
        assert CompactionSettings.from_mapping(config.compaction).auto is False
        monkeypatch.chdir(project)
        session = plait.new_session(project)
        sent = plait("send", session, "What is this?", "--json")
        assert sent.code == 0, sent.err
        assert sent.json["status"] == "completed"


def test_init_declares_a_given_context_window(plait: Plait, project: Path) -> None:
    spec = "openai-compatible:http://127.0.0.1:9/v1#local"
    r = plait.raw("init", str(project), "--model", spec, "--context-window", "32768", "--json")
    assert r.code in (0, 1), r.err
    config = load_config(cwd=project, env={"HOME": str(project / "home")})
    assert config.model == "project"
    assert config.models["project"].spec == spec
    assert config.models["project"].settings["context_window"] == 32768
    # structured output is still unknown: compaction stays off, and says why
    assert CompactionSettings.from_mapping(config.compaction).auto is False
    assert "structured output" in r.json["next"][0]


def test_init_context_window_without_a_model_is_refused(plait: Plait, project: Path) -> None:
    r = plait.raw("init", str(project), "--context-window", "32768", "--json")
    assert r.code == 2
    assert "--context-window needs a model" in r.json["error"]["message"]
    assert not (project / "plait.toml").exists()


def test_init_for_a_known_model_keeps_compaction_on(plait: Plait, project: Path) -> None:
    r = plait.raw("init", str(project), "--model", "openai:gpt-4.1", "--json")
    assert r.code == 0, r.err
    config = load_config(cwd=project, env={"HOME": str(project / "home")})
    assert CompactionSettings.from_mapping(config.compaction).auto is True
    assert not any("compaction is off" in step for step in r.json["next"])
