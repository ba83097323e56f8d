"""docs/python-api.md's "Typed answers" example runs as written and prints the model instance."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).parents[2] / "docs" / "python-api.md"


def test_the_example_runs(capsys: pytest.CaptureFixture[str]) -> None:
    section = README.read_text().split("### Typed answers", 1)[1].split("\n### ", 1)[0]
    [code] = re.findall(r"```python\n(.*?)```", section, re.DOTALL)
    exec(compile(code, str(README), "exec"), {"__name__": "readme"})
    assert capsys.readouterr().out == "Count(files=2, biggest='tax.py')\n"
