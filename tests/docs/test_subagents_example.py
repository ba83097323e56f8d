"""docs/python-api.md's "Sub-agents" example runs as written: the lead delegates, the counter's
child run reads the file and answers."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).parents[2] / "docs" / "python-api.md"


def test_the_example_runs(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PLAIT_POLICY", raising=False)
    section = README.read_text().split("### Sub-agents", 1)[1].split("\n### ", 1)[0]
    [code] = re.findall(r"```python\n(.*?)```", section, re.DOTALL)
    exec(compile(code, str(README), "exec"), {"__name__": "readme"})
    assert capsys.readouterr().out.splitlines() == [
        "completed The counter says 2.",
        "completed counter",
        "completed top-level",
    ]
