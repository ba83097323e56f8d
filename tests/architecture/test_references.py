"""The code names documents a reader of this repository has: the design documents plait
was written from are not in it (``docs/design.md`` summarises them), so no docstring or
comment sends a reader to ``DESIGN §N`` or a seed's section; the anchors it names exist."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src" / "plait"


def _sources() -> list[tuple[Path, str]]:
    return [(path, path.read_text(encoding="utf-8")) for path in sorted(SRC.rglob("*.py"))]


def test_no_reference_to_documents_outside_the_repository() -> None:
    outside = re.compile(r"DESIGN\s*(§|section)|seed\s*(§|section)")
    found = [
        f"{path.relative_to(ROOT)}:{number}"
        for path, text in _sources()
        for number, line in enumerate(text.splitlines(), 1)
        if outside.search(line)
    ]
    assert found == []


def test_the_design_anchors_named_exist() -> None:
    headings = (ROOT / "docs" / "design.md").read_text(encoding="utf-8").splitlines()
    anchors = {
        re.sub(r"[^a-z0-9 -]", "", line[3:].strip().lower()).replace(" ", "-")
        for line in headings
        if line.startswith("## ")
    }
    named = {
        anchor
        for _, text in _sources()
        for anchor in re.findall(r"docs/design\.md#([a-z0-9-]+)", text)
    }
    assert named and named <= anchors, named - anchors
