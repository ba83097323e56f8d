"""No import cycles between plait's modules, and an import inside a function only where
start-up time needs it, saying so in a ``# lazy:`` comment (issue 22 item 2)."""

from __future__ import annotations

import ast
from pathlib import Path

import grimp
import pytest

SRC = Path(__file__).resolve().parents[2] / "src" / "plait"


def _cycles(graph: grimp.ImportGraph) -> list[set[str]]:
    """The strongly connected groups of more than one module (Tarjan's algorithm)."""
    modules = sorted(graph.modules)
    edges = {m: sorted(graph.find_modules_directly_imported_by(m)) for m in modules}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[set[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for target in edges[module]:
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in on_stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            group = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.add(member)
                if member == module:
                    break
            if len(group) > 1:
                groups.append(group)

    for module in modules:
        if module not in index:
            visit(module)
    return groups


@pytest.mark.slow  # builds the whole import graph
def test_no_import_cycles() -> None:
    graph = grimp.build_graph("plait", cache_dir=None)
    assert _cycles(graph) == []


def test_the_cycle_finder_finds_a_cycle() -> None:
    graph = grimp.ImportGraph()
    for module in ("pkg", "pkg.a", "pkg.b", "pkg.c"):
        graph.add_module(module)
    graph.add_import(importer="pkg.a", imported="pkg.b")
    graph.add_import(importer="pkg.b", imported="pkg.a")
    graph.add_import(importer="pkg.c", imported="pkg.a")
    assert _cycles(graph) == [{"pkg.a", "pkg.b"}]


def unexplained_lazy_imports(path: Path) -> list[int]:
    """Lines of imports inside a function with no ``# lazy:`` comment on the import, or
    above it (one comment may cover a block of imports). In a module's ``__getattr__``
    (PEP 562: attributes imported when first used) one comment in its body covers it."""
    lines = path.read_text().splitlines()
    found: list[int] = []

    def explained(statement: ast.stmt) -> bool:
        lineno, end = statement.lineno, statement.end_lineno or statement.lineno
        if any("# lazy:" in line for line in lines[lineno - 1 : end]):
            return True
        above = lineno - 2
        while above >= 0:
            text = lines[above].strip()
            if "# lazy:" in text:
                return True
            if not text.startswith(("#", "from ", "import ")):
                return False
            above -= 1
        return False

    def walk(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if (
                isinstance(child, ast.Import | ast.ImportFrom)
                and in_function
                and not explained(child)
            ):
                found.append(child.lineno)
            function = isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef)
            walk(child, in_function or function)

    tree = ast.parse("\n".join(lines))
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == "__getattr__":
            body = lines[node.lineno - 1 : node.end_lineno]
            if any("# lazy:" in line for line in body):
                tree.body.remove(node)
    walk(tree, False)
    return found


def test_every_lazy_import_says_why() -> None:
    files = sorted(SRC.rglob("*.py"))  # every module of plait
    assert len(files) > 100
    unexplained = {
        str(path.relative_to(SRC)): lines
        for path in files
        if (lines := unexplained_lazy_imports(path))
    }
    assert unexplained == {}


def test_an_unexplained_lazy_import_is_found(tmp_path: Path) -> None:
    module = tmp_path / "module.py"
    module.write_text(
        "import json\n\n\n"
        "def explained():\n"
        "    # lazy: costs 100 ms\n"
        "    import csv\n"
        "    import decimal\n\n\n"
        "def unexplained():\n"
        "    # a comment that is no reason\n"
        "    import fractions\n"
    )
    assert unexplained_lazy_imports(module) == [12]
