"""The files under ``examples/`` are the ones the docs and the demo describe."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from plait.entrypoints.cli.demo import DEMO_PROJECT

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"


def test_the_shop_is_the_demo_project() -> None:
    shipped = {
        str(p.relative_to(EXAMPLES / "shop")): p.read_text(encoding="utf-8")
        for p in (EXAMPLES / "shop").rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    }
    assert shipped == DEMO_PROJECT


def test_the_tax_script_is_the_demo_script() -> None:
    demo = resources.files("plait.entrypoints.cli").joinpath("demo_data/script.yaml")
    assert (EXAMPLES / "fix-the-tax.yaml").read_text(encoding="utf-8") == demo.read_text(
        encoding="utf-8"
    )


def test_the_typo_script_is_the_documented_complete_example() -> None:
    doc = (ROOT / "docs" / "scripted-model.md").read_text(encoding="utf-8")
    start = doc.index("```yaml\n", doc.index("<!-- complete example -->")) + len("```yaml\n")
    block = doc[start : doc.index("```", start)]
    assert (EXAMPLES / "fix-typo.yaml").read_text(encoding="utf-8") == block


def test_the_complete_examples_summary_has_the_summarizers_shape() -> None:
    """Its decisions are notes (objects with their sources), not plain strings, which
    the summarizer's schema refuses (issue 26 item 6)."""
    import yaml

    from plait.domain.summary import parse_summary_body

    script = yaml.safe_load((EXAMPLES / "fix-typo.yaml").read_text(encoding="utf-8"))
    (entry,) = script["summarizer"]
    body = parse_summary_body(entry["structured"])
    assert [d.text for d in body.decisions] == ["Only README.md is changed"]
