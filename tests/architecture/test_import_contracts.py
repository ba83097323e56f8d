"""The import rules of docs/architecture.md, as import-linter contracts in pyproject.toml:
they hold on this tree, and a deliberate violation in a copy of it breaks them, naming the
contract."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")

pytestmark = pytest.mark.slow  # lint-imports builds the whole import graph in a subprocess


def _lint(project: Path) -> subprocess.CompletedProcess[str]:
    """``lint-imports`` over ``project`` (its pyproject.toml and its src/plait)."""
    env = dict(os.environ, PYTHONPATH=str(project / "src"))
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache"],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def _copy(tmp_path: Path) -> Path:
    project = tmp_path / "project"
    shutil.copytree(
        ROOT / "src" / "plait",
        project / "src" / "plait",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    shutil.copy(ROOT / "pyproject.toml", project / "pyproject.toml")
    return project


def _add_import(module: Path, statement: str) -> None:
    text = module.read_text()
    anchor = "from __future__ import annotations\n"
    assert anchor in text
    module.write_text(text.replace(anchor, f"{anchor}\n{statement}\n", 1))


def test_the_tree_keeps_every_contract() -> None:
    result = _lint(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "BROKEN" not in result.stdout
    assert "Contracts: 4 kept, 0 broken." in result.stdout


@pytest.mark.parametrize(
    ("module", "statement", "contract"),
    [
        # the domain reaching up into the application layer
        (
            "domain/text.py",
            "import plait.application.ports",
            "Layers: dependencies point down",
        ),
        # an adapter reaching up into an entry point
        (
            "adapters/shapes.py",
            "import plait.entrypoints.http.auth",
            "Layers: dependencies point down",
        ),
        # one adapter reaching into another's private module
        (
            "adapters/mcp/tools.py",
            "import plait.adapters.models._sse",
            "A _private module is imported only inside its own package",
        ),
        # an entry point reaching past the stores' public API into a backend
        (
            "entrypoints/http/server.py",
            "import plait.adapters.stores.postgres.feed",
            "Store backends and their shared code are reached only through",
        ),
        # the API taking a shape from the command line (the cycle issue 22 found)
        (
            "entrypoints/http/events.py",
            "import plait.entrypoints.cli.governance",
            "The HTTP API does not import the command line",
        ),
    ],
)
def test_a_violation_breaks_its_contract(
    tmp_path: Path, module: str, statement: str, contract: str
) -> None:
    project = _copy(tmp_path)
    _add_import(project / "src" / "plait" / module, statement)
    result = _lint(project)
    assert result.returncode == 1, result.stdout + result.stderr
    broken = result.stdout.split("Broken contracts", 1)[1]
    assert contract in " ".join(broken.split())
    assert "Contracts: 3 kept, 1 broken." in result.stdout
