"""OpenTelemetry is imported only by the telemetry adapter (DESIGN §1): the domain, the
application and every other adapter and entry point see only the RunTelemetry port."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import plait

SRC = Path(plait.__file__).parent
ADAPTER = SRC / "adapters" / "telemetry"


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


@pytest.mark.slow
def test_only_the_telemetry_adapter_imports_opentelemetry() -> None:
    importers = {
        str(path.relative_to(SRC))
        for path in SRC.rglob("*.py")
        if any(name.split(".")[0] == "opentelemetry" for name in _imports(path))
    }
    assert importers == {"adapters/telemetry/_otel.py"}
    assert not any(name.startswith("opentelemetry") for name in _imports(ADAPTER / "__init__.py"))
    assert not any(name.startswith("opentelemetry") for name in _imports(ADAPTER / "_settings.py"))
