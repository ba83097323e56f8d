"""Names explain themselves: no one-letter parameters or variables outside comprehensions
(type variables excepted), and no ``# fmt: skip`` to dodge the line length (issue 22
item 7)."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src" / "plait"


def one_letter_names(source: str) -> list[tuple[int, str]]:
    """(line, name) of each one-letter parameter, assigned name or ``except ... as``
    name that is not a comprehension's target nor a ``TypeVar`` (``T = TypeVar("T")``)."""
    tree = ast.parse(source)
    allowed: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.comprehension):
            allowed.update(id(target) for target in ast.walk(node.target))
        if (
            isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Call)
            and isinstance(node.value.func, ast.Name)
            and node.value.func.id == "TypeVar"
        ):
            allowed.update(id(target) for target in node.targets)
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            named: tuple[int, str | None] = (node.lineno, node.id)
        elif isinstance(node, ast.arg):
            named = (node.lineno, node.arg)
        elif isinstance(node, ast.ExceptHandler):
            named = (node.lineno, node.name)
        else:
            continue
        line, name = named
        if name is not None and len(name) == 1 and name != "_" and id(node) not in allowed:
            found.append((line, name))
    return sorted(found)


def test_no_one_letter_names() -> None:
    files = sorted(SRC.rglob("*.py"))
    assert len(files) > 100
    found = {
        str(path.relative_to(SRC)): names
        for path in files
        if (names := one_letter_names(path.read_text()))
    }
    assert found == {}


def test_no_fmt_skip() -> None:
    marker = "# fmt: " + "skip"
    found = [str(p.relative_to(SRC)) for p in SRC.rglob("*.py") if marker in p.read_text()]
    assert found == []


def test_a_one_letter_name_is_found() -> None:
    source = (
        "from typing import TypeVar\n"
        'T = TypeVar("T")\n'
        "def f(a, count):\n"
        "    x = [v for v in count]\n"
        "    try:\n"
        "        pass\n"
        "    except ValueError as e:\n"
        "        pass\n"
        "    return sorted(x, key=lambda k: k)\n"
    )
    assert one_letter_names(source) == [(3, "a"), (4, "x"), (7, "e"), (9, "k")]
