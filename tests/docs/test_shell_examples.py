"""Every shell example in the README and in ``docs/`` runs as written (the Python
examples: ``test_python_examples.py``).

Each ```` ```bash ```` (or ``sh``) block is run from the repository root by ``bash -e -o
pipefail`` with a temporary ``HOME``, ``XDG_DATA_HOME`` and ``TMPDIR`` and no ``PLAIT_*``
settings, so it cannot touch the developer's own store. ``uv run CMD`` runs ``CMD`` from
this test's virtual environment (what ``uv run`` would run, without re-syncing it from
inside the suite). A block preceded by ``<!-- doc-test: skip (reason) -->`` is not run;
``console`` blocks are transcripts and are not run either.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
_FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```", re.MULTILINE | re.DOTALL)
_SKIP = re.compile(r"<!--\s*doc-test:\s*skip\s*\(([^)]+)\)\s*-->\s*$")
_UV_SHIM = 'uv() { if [ "$1" = run ]; then shift; command "$@"; else command uv "$@"; fi; }\n'


@dataclass(frozen=True)
class Block:
    path: Path
    line: int
    code: str
    skip: str | None

    @property
    def name(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def code_blocks(path: Path, languages: tuple[str, ...] = ("bash", "sh", "shell")) -> list[Block]:
    """The fenced blocks of ``path`` in one of ``languages``, in the order they appear."""
    text = path.read_text(encoding="utf-8")
    blocks: list[Block] = []
    for match in _FENCE.finditer(text):
        if match.group(1) not in languages:
            continue
        line = text.count("\n", 0, match.start()) + 1
        before = text[: match.start()].rstrip("\n").rsplit("\n", 1)[-1]
        skip = _SKIP.search(before)
        blocks.append(Block(path, line, match.group(2), skip.group(1) if skip else None))
    return blocks


BLOCKS = [b for path in DOCS for b in code_blocks(path)]


def test_the_docs_have_shell_examples() -> None:
    assert len([b for b in BLOCKS if b.skip is None]) >= 3
    assert all(b.skip.strip() for b in BLOCKS if b.skip is not None)


def run_example(argv: list[str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """Run an example from the repository root with a temporary ``HOME``,
    ``XDG_DATA_HOME`` and ``TMPDIR``, no ``PLAIT_*`` settings, and this environment's
    ``bin`` first on ``PATH``."""
    for name in ("home", "data", "tmp"):
        (tmp_path / name).mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PLAIT_")}
    env |= {
        "HOME": str(tmp_path / "home"),
        "XDG_DATA_HOME": str(tmp_path / "data"),
        "TMPDIR": str(tmp_path / "tmp"),
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
    }
    return subprocess.run(
        argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False
    )


@pytest.mark.slow
@pytest.mark.parametrize("block", BLOCKS, ids=[b.name for b in BLOCKS])
def test_shell_example_runs(block: Block, tmp_path: Path) -> None:
    if block.skip is not None:
        pytest.skip(f"marked in the doc: {block.skip}")
    script = tmp_path / "example.sh"
    script.write_text("set -e -o pipefail\n" + _UV_SHIM + block.code, encoding="utf-8")
    proc = run_example(["bash", str(script)], tmp_path)
    assert proc.returncode == 0, (
        f"{block.name} failed with status {proc.returncode}\n--- stdout\n{proc.stdout[-3000:]}"
        f"\n--- stderr\n{proc.stderr[-3000:]}"
    )
    assert "Traceback" not in proc.stderr, proc.stderr
