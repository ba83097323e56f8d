"""Model specs, plait.toml and capability checks at start."""

from __future__ import annotations

from pathlib import Path

import pytest

from plait.adapters.models import open_model, parse_spec, resolve
from plait.config import Config, load_config
from plait.domain.errors import ConfigError
from tests.adapters._cassettes import tool


def test_specs_parse() -> None:
    assert str(parse_spec("openai:gpt-4o")) == "openai:gpt-4o"
    s = parse_spec("openai-compatible:http://127.0.0.1:8000/v1/#Qwen/Qwen3-8B")
    assert (s.kind, s.base_url, s.model) == (
        "openai-compatible",
        "http://127.0.0.1:8000/v1",
        "Qwen/Qwen3-8B",
    )
    for bad, fragment in [
        ("gpt-4o", "KIND:NAME"),
        ("nope:x", "unknown model kind 'nope'"),
        ("openai-compatible:localhost:8000#m", "openai-compatible:BASE_URL#MODEL"),
        ("openai-compatible:http://h/v1", "openai-compatible:BASE_URL#MODEL"),
    ]:
        with pytest.raises(ConfigError) as info:
            parse_spec(bad)
        assert fragment in info.value.message and info.value.details == {"spec": bad}


def test_builtin_capabilities_and_vendors() -> None:
    r = resolve("anthropic:claude-haiku-4-5-20251001", Config())
    assert r.known and r.capabilities.context_window == 200_000
    assert r.capabilities.price_input_per_mtok == 1.0 and r.target.vendor == "anthropic"
    ds = resolve("openai-compatible:https://api.deepseek.com#deepseek-reasoner", Config())
    assert ds.target.vendor == "deepseek" and ds.capabilities.reasoning
    assert ds.key_env == ("DEEPSEEK_API_KEY",)
    local = resolve("openai-compatible:http://127.0.0.1:9/v1#qwen", Config())
    assert not local.known and local.capabilities.context_window is None
    assert local.key_env == ()
    assert resolve("gemini:gemini-2.5-pro", Config()).key_env == (
        "GEMINI_API_KEY",
        "GOOGLE_API_KEY",
    )


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def test_config_files_project_over_user_env_over_both(tmp_path: Path) -> None:
    home = tmp_path / "xdg"
    _write(
        home / "plait" / "config.toml",
        'model = "openai:gpt-4o"\n'
        "[models.local]\n"
        'spec = "openai-compatible:http://127.0.0.1:8000/v1#qwen"\n'
        'context_window = 8192\nkey_env = "LOCAL_KEY"\n',
    )
    project = tmp_path / "proj"
    _write(
        project / "plait.toml", "[models.local]\ncontext_window = 32768\nprice_input_per_mtok = 0\n"
    )
    env = {"XDG_CONFIG_HOME": str(home)}
    config = load_config(project, env)
    assert config.model == "openai:gpt-4o"
    r = resolve("local", config)
    assert r.capabilities.context_window == 32768 and r.capabilities.price_input_per_mtok == 0
    assert r.key_env == ("LOCAL_KEY",) and r.known
    assert load_config(project, {**env, "PLAIT_MODEL": "local"}).model == "local"
    with pytest.raises(ConfigError) as info:
        open_model("local", config=config, env={})
    assert "LOCAL_KEY" in info.value.message
    model = open_model("local", config=config, env={"LOCAL_KEY": "k"})
    assert model.name == "openai-compatible:http://127.0.0.1:8000/v1#qwen"
    assert model.capabilities.context_window == 32768


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("[models.x]\ncontex_window = 3\n", "unknown key 'contex_window'"),
        ("[models.x]\ncontext_window = 'big'\n", "wrong type"),
        ("modle = 'x'\n", "unknown top-level key 'modle'"),
        ("model = [\n", "cannot read it"),
    ],
)
def test_bad_config_is_an_error_naming_file_and_key(
    tmp_path: Path, text: str, fragment: str
) -> None:
    path = _write(tmp_path / "plait.toml", text)
    with pytest.raises(ConfigError) as info:
        load_config(tmp_path, {"XDG_CONFIG_HOME": str(tmp_path / "none")})
    assert fragment in info.value.message and str(path) in info.value.message


def test_a_setting_the_model_cannot_honour_names_setting_and_model(tmp_path: Path) -> None:
    _write(tmp_path / "plait.toml", '[models."openai:gpt-4o"]\nthinking_budget = 2000\n')
    config = load_config(tmp_path, {"XDG_CONFIG_HOME": str(tmp_path / "none")})
    with pytest.raises(ConfigError) as info:
        open_model("openai:gpt-4o", config=config, env={"OPENAI_API_KEY": "k"})
    assert info.value.details == {"setting": "thinking_budget", "model": "openai:gpt-4o"}


def test_an_inexpressible_tool_schema_fails_when_the_model_is_opened() -> None:
    odd = tool(
        "pick", {"type": "object", "properties": {"n": {"type": "integer", "multipleOf": 2}}}
    )
    with pytest.raises(ConfigError) as info:
        open_model(
            "gemini:gemini-2.5-pro", tools=[odd], config=Config(), env={"GEMINI_API_KEY": "k"}
        )
    assert info.value.details["tool"] == "pick" and info.value.details["keyword"] == "multipleOf"
    open_model("openai:gpt-4o", tools=[odd], config=Config(), env={"OPENAI_API_KEY": "k"})
