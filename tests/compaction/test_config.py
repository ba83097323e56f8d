"""Compaction settings from plait.toml's ``[compaction]`` table, including the
summarizer's model (default: the session's)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from plait.domain.compaction import CompactionSettings
from plait.domain.errors import ConfigError, ValidationError
from plait.runtime import Runtime


def test_settings_from_a_table() -> None:
    s = CompactionSettings.from_mapping(
        {"threshold": 0.7, "auto": False, "retained_tokens": 2_000, "max_overflow_retries": 0,
         "safety_margin_ratio": 0, "summarizer_model": "openai:gpt-4o-mini"}
    )  # fmt: skip
    assert s.threshold == 0.7 and not s.auto and s.retained_tokens == 2_000
    assert s.max_overflow_retries == 0 and s.safety_margin_ratio == 0.0
    assert s.summarizer_model == "openai:gpt-4o-mini"
    assert CompactionSettings.from_mapping({}) == CompactionSettings()
    with pytest.raises(ValidationError, match="unknown key 'treshold'; known: auto"):
        CompactionSettings.from_mapping({"treshold": 0.7})
    with pytest.raises(ValidationError, match="summary_retries must be an integer"):
        CompactionSettings.from_mapping({"summary_retries": True})
    with pytest.raises(ValidationError, match="auto must be true or false"):
        CompactionSettings.from_mapping({"auto": "yes"})
    with pytest.raises(ValidationError, match="threshold must be in"):
        CompactionSettings.from_mapping({"threshold": 3})


def _script(path: Path, name: str, window: int) -> str:
    path.write_text(
        json.dumps({"version": 1, "model": name, "capabilities": {"context_window": window}}),
        encoding="utf-8",
    )
    return f"scripted:{path}"


def test_plait_toml_configures_compaction_and_the_summarizer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    main = _script(tmp_path / "main.yaml", "main", 8_000)
    summarizer = _script(tmp_path / "sum.yaml", "summarizer", 64_000)
    (tmp_path / "plait.toml").write_text(
        f'[compaction]\nthreshold = 0.5\nsummarizer_model = "{summarizer}"\n', encoding="utf-8"
    )
    monkeypatch.chdir(tmp_path)

    async def go() -> None:
        rt = Runtime.open(db="memory://", model=main)
        try:
            assert rt.compaction is not None
            assert rt.compaction.settings.threshold == 0.5
            assert rt.compaction.summarizer is not None
            assert rt.compaction.summarizer.name != rt.service.caller.model.name
            assert rt.compaction.profiles.get(rt.compaction.summarizer.name).context_window == (
                64_000
            )
        finally:
            await rt.close()

    asyncio.run(go())
    (tmp_path / "plait.toml").write_text("[compaction]\nthreshhold = 0.5\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"plait.toml: \[compaction\]: unknown key 'threshhold'"):
        Runtime.open(db="memory://", model=main)
