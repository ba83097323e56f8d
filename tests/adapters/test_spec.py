"""Model specs, plait.toml and capability checks at start."""

from __future__ import annotations

import datetime as dt
import json
import runpy
from pathlib import Path

import pytest

from plait.adapters.models import _catalog_source, open_model, parse_spec, resolve
from plait.adapters.models._catalog import (
    CATALOG_DATE,
    CATALOG_SOURCE,
    builtin_models,
    load_catalog,
)
from plait.adapters.models._catalog_source import catalog_from_litellm
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


@pytest.mark.parametrize(
    ("budget", "fragment"),
    [(512, "at least 1024 tokens"), (64_000, "below the model's max output (64000)")],
)
def test_a_thinking_budget_anthropic_cannot_take_is_refused_when_opened(
    tmp_path: Path, budget: int, fragment: str
) -> None:
    spec = "anthropic:claude-sonnet-4-5"
    _write(tmp_path / "plait.toml", f'[models."{spec}"]\nthinking_budget = {budget}\n')
    config = load_config(tmp_path, {"XDG_CONFIG_HOME": str(tmp_path / "none")})
    with pytest.raises(ConfigError) as info:
        open_model(spec, config=config, env={"ANTHROPIC_API_KEY": "k"})
    assert fragment in info.value.message
    assert info.value.details == {"setting": "thinking_budget", "model": spec}
    _write(tmp_path / "plait.toml", f'[models."{spec}"]\nthinking_budget = 8000\n')
    config = load_config(tmp_path, {"XDG_CONFIG_HOME": str(tmp_path / "none")})
    open_model(spec, config=config, env={"ANTHROPIC_API_KEY": "k"})


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


_SAMPLE = Path(__file__).parent / "fixtures" / "catalog" / "litellm_sample.json"
_WANTED = {
    "openai": ("gpt-7", "gpt-7-mini", "gpt-9"),
    "anthropic": ("claude-lyric-9", "claude-old-1"),
    "gemini": ("gemini-9-pro", "gemini-9-flash"),
    "deepseek": ("deepseek-reasoner",),
}


def test_catalog_source_parser_reads_litellms_format() -> None:
    source = json.loads(_SAMPLE.read_text(encoding="utf-8"))
    document, notes = catalog_from_litellm(
        source, as_of=dt.date(2026, 7, 24), origin="sample", wanted=_WANTED
    )
    assert document["as_of"] == "2026-07-24" and document["source"] == "sample"
    tables = document["models"]
    assert tables["openai"]["gpt-7"] == {
        "context_window": 400_000,
        "max_output_tokens": 128_000,
        "tool_calls": True,
        "parallel_tool_calls": True,
        "structured_output": True,
        "streaming": True,
        "reasoning": True,
        "price_input_per_mtok": 1.25,
        "price_output_per_mtok": 10.0,
        "price_cached_input_per_mtok": 0.125,
    }
    mini = tables["openai"]["gpt-7-mini"]  # found as its dated variant
    assert (mini["context_window"], mini["parallel_tool_calls"]) == (272_000, False)
    assert mini["price_cached_input_per_mtok"] is None  # absent: unknown, never 0
    assert not mini["structured_output"] and not mini["reasoning"]
    assert tables["anthropic"]["claude-lyric-9"]["parallel_tool_calls"] is True  # follows tools
    assert tables["gemini"]["gemini-9-pro"]["price_input_per_mtok"] == 2.0  # Gemini API first
    reasoner = tables["deepseek"]["deepseek-reasoner"]
    assert reasoner["tool_calls"] and reasoner["parallel_tool_calls"]  # a documented correction
    assert notes == [
        "openai:gpt-9: not in the source",
        "anthropic:claude-old-1: retired on 2026-01-31",
        "gemini:gemini-9-flash: the source gives no context window",
    ]
    assert set(tables["anthropic"]) == {"claude-lyric-9"}
    with pytest.raises(ValueError, match="unknown catalog table 'mistral'"):
        catalog_from_litellm(source, as_of=dt.date(2026, 7, 24), origin="s", wanted={"mistral": ()})


def test_refresh_script_rewrites_a_loadable_catalog(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    script = Path(__file__).parents[2] / "scripts" / "refresh_catalog.py"
    main = runpy.run_path(str(script))["main"]
    monkeypatch.setattr(_catalog_source, "WANTED", _WANTED)
    out = tmp_path / "catalog.json"
    argv = ["--source", str(_SAMPLE), "--date", "2026-07-24", "--out", str(out)]
    assert main(argv) == 0
    date, source, tables = load_catalog(out.read_text(encoding="utf-8"))
    assert date == "2026-07-24" and "litellm_sample.json" in source
    assert tables["anthropic"]["claude-lyric-9"].price_output_per_mtok == 15.0
    assert tables["openai"]["gpt-7"].context_window == 400_000
    captured = capsys.readouterr()
    assert "catalog.json: 5 models as of 2026-07-24" in captured.out
    assert "left out openai:gpt-9: not in the source" in captured.err


def test_builtin_catalog_covers_current_models_with_window_and_prices() -> None:
    assert dt.date.fromisoformat(CATALOG_DATE) >= dt.date(2026, 7, 1)
    assert "model_prices_and_context_window.json" in CATALOG_SOURCE
    for spec in (
        "anthropic:claude-sonnet-4-5",
        "anthropic:claude-sonnet-4-6",
        "anthropic:claude-opus-4-7",
        "anthropic:claude-haiku-4-5-20251001",
        "openai:gpt-5.5",
        "openai-responses:gpt-5.4",
        "gemini:gemini-3.1-pro-preview",
        "gemini:gemini-2.5-flash",
    ):
        caps = resolve(spec, Config()).capabilities
        assert caps.context_window and caps.max_output_tokens, spec
        assert caps.price_input_per_mtok and caps.price_output_per_mtok, spec
    sonnet = resolve("anthropic:claude-sonnet-4-5", Config()).capabilities
    assert (sonnet.context_window, sonnet.price_input_per_mtok) == (200_000, 3.0)
    kinds = {spec.split(":", 1)[0] for spec, _ in builtin_models()}
    assert kinds == {"openai", "openai-responses", "anthropic", "gemini", "openai-compatible"}
    for spec, caps in builtin_models():
        assert caps.context_window and caps.price_input_per_mtok is not None, spec
