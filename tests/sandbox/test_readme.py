"""docs/sandbox.md's sandbox section runs as written and states the real defaults."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

from plait.adapters.tools import SandboxSettings

README = Path(__file__).parents[2] / "docs" / "sandbox.md"


def _blocks(language: str) -> list[str]:
    text = README.read_text()
    section = text.split("## run_command and the sandbox", 1)[1].split("\n## ", 1)[0]
    return re.findall(rf"```{language}\n(.*?)```", section, re.DOTALL)


def test_the_settings_table_shows_the_defaults() -> None:
    [table] = _blocks("toml")
    assert SandboxSettings.from_mapping(tomllib.loads(table)["sandbox"]) == SandboxSettings()


@pytest.mark.slow
@pytest.mark.usefixtures("bwrap")
def test_the_python_example_runs(capsys: pytest.CaptureFixture[str]) -> None:
    [code] = _blocks("python")
    exec(compile(code, str(README), "exec"), {"__name__": "readme"})
    shown = capsys.readouterr().out
    assert "Read-only file system" in shown
    assert "/root': No such file or directory" in shown
    assert "$ test -f deploy/app.yaml\nexit code 0" in shown
