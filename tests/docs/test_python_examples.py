"""Every Python example in the README and in ``docs/`` runs as written, in the order the
pages show them: each ```` ```python ```` block is run by this environment's Python as a
script from the repository root, with the temporary directories and settings of
``test_shell_examples.py``. A block preceded by ``<!-- doc-test: skip (reason) -->`` is not
run here: the reason names the test that runs it and checks its output, or says why it
cannot run.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.docs.test_shell_examples import DOCS, Block, code_blocks, run_example

BLOCKS = [b for path in DOCS for b in code_blocks(path, ("python",))]


def test_the_docs_have_python_examples() -> None:
    assert [b.path.name for b in BLOCKS[:1]] == ["README.md"]
    assert len([b for b in BLOCKS if b.skip is None]) >= 3
    assert all(b.skip.strip() for b in BLOCKS if b.skip is not None)


@pytest.mark.slow
@pytest.mark.parametrize("block", BLOCKS, ids=[b.name for b in BLOCKS])
def test_python_example_runs(block: Block, tmp_path: Path) -> None:
    if block.skip is not None:
        pytest.skip(f"marked in the doc: {block.skip}")
    script = tmp_path / "example.py"
    script.write_text(block.code, encoding="utf-8")
    proc = run_example([sys.executable, str(script)], tmp_path)
    assert proc.returncode == 0, (
        f"{block.name} failed with status {proc.returncode}\n--- stdout\n{proc.stdout[-3000:]}"
        f"\n--- stderr\n{proc.stderr[-3000:]}"
    )
