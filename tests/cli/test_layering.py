"""Every surface goes through the service: the CLI opens no store, builds no session, run
or message itself, and serializes only through ``plait.adapters.shapes``."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import plait.entrypoints.cli

CLI = Path(plait.entrypoints.cli.__file__).parent
FORBIDDEN_MODULES = ("plait.adapters.stores", "plait.entrypoints.cli._json")
CONSTRUCTORS = {
    "Session",
    "Run",
    "Lease",
    "UserMessage",
    "AssistantMessage",
    "ToolResultMessage",
    "ToolCall",
    "ToolResult",
    "ExecutionRecord",
    "StoredMessage",
}


def _runtime_nodes(tree: ast.Module) -> list[ast.AST]:
    """Every node except those under ``if TYPE_CHECKING:`` (annotations only)."""
    nodes: list[ast.AST] = []
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            stack.extend(node.orelse)
            continue
        nodes.append(node)
        stack.extend(ast.iter_child_nodes(node))
    return nodes


def _imports(path: Path) -> list[tuple[str, str]]:
    found: list[tuple[str, str]] = []
    for node in _runtime_nodes(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module:
            found += [(node.module, alias.name) for alias in node.names]
        elif isinstance(node, ast.Import):
            found += [(alias.name, "") for alias in node.names]
    return found


def _factory_call(func: ast.expr) -> bool:
    """``ToolCall.create(...)`` and the like: a domain object built by its factory."""
    return (
        isinstance(func, ast.Attribute)
        and isinstance(func.value, ast.Name)
        and func.value.id in CONSTRUCTORS
    )


# `plait db upgrade` administers the store itself (PostgreSQL migrations).
STORE_ADMIN = {"service_cmds.py"}


def test_the_cli_imports_no_store_and_builds_no_domain_object() -> None:
    files = sorted(CLI.glob("*.py"))
    assert len(files) >= 5
    for path in files:
        for module, _name in _imports(path):
            if path.name not in STORE_ADMIN:
                assert not module.startswith(FORBIDDEN_MODULES), (path.name, module)
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                func = node.func
                name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
                assert name not in CONSTRUCTORS, (path.name, node.lineno, name)
                assert not _factory_call(func), (path.name, node.lineno, ast.unparse(func))


RUNTIME_INTERNALS = {"store", "artifacts"}
"""The ports a Runtime holds: a command reads through ``runtime.queries`` and writes
through ``runtime.service`` (or ``runtime.forks``), never through these."""


def _touched_internals(source: str) -> list[tuple[int, str]]:
    return [
        (node.lineno, ast.unparse(node))
        for node in _runtime_nodes(ast.parse(source))
        if isinstance(node, ast.Attribute) and node.attr in RUNTIME_INTERNALS
    ]


def test_no_command_reads_the_runtime_store() -> None:
    for path in sorted(CLI.glob("*.py")):
        assert _touched_internals(path.read_text(encoding="utf-8")) == [], path.name


def test_the_store_check_catches_a_command_that_reads_the_store() -> None:
    offending = "async def go(rt):\n    return await rt.store.read_messages('s')\n"
    assert _touched_internals(offending) == [(2, "rt.store")]
    through_queries = "async def go(rt):\n    return await rt.queries.history('s')\n"
    assert _touched_internals(through_queries) == []


@pytest.mark.slow
def test_json_comes_from_the_one_serializer() -> None:
    for path in sorted(CLI.glob("*.py")):
        for module, name in _imports(path):
            if name.endswith("_json") and name not in ("event_json", "error_json"):
                assert module == "plait.adapters.shapes", (path.name, module, name)
