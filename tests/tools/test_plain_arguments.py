"""A built-in tool's arguments that certainly satisfy its schema are made into its
executor's values from the schema alone, without importing pydantic (~0.1 s of every
`plait send`'s first tool call): the values must be the typed model's, field by field."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest

from plait.adapters.tools._catalog import SCHEMAS, _plain, parse
from plait.adapters.tools._specs import MODELS
from plait.domain.errors import ToolError

HEX = "ab" * 32

VALID: list[tuple[str, dict[str, Any]]] = [
    ("read_file", {"path": "a.py"}),
    ("read_file", {"path": "a.py", "offset_line": 3, "max_lines": 10}),
    ("list_dir", {}),
    ("list_dir", {"path": "src", "recursive": True}),
    ("search_text", {"pattern": "def "}),
    (
        "search_text",
        {
            "pattern": "x+",
            "path": "src",
            "regex": True,
            "ignore_case": True,
            "glob": "*.py",
            "max_results": 1000,
        },
    ),
    ("write_file", {"path": "a.txt", "content": ""}),
    ("write_file", {"path": "a.txt", "content": "x\n", "expected_sha256": "absent"}),
    ("write_file", {"path": "a.txt", "content": "x", "expected_sha256": HEX.upper()}),
    ("write_file", {"path": "a.txt", "content": "x", "expected_sha256": "sha256:" + HEX}),
    ("edit_file", {"path": "a.py", "old_string": "a", "new_string": ""}),
    ("edit_file", {"path": "a.py", "old_string": "a", "new_string": "b", "replace_all": True}),
    ("run_command", {"command": "ls -la"}),
    ("run_command", {"command": "pytest -q", "cwd": "src", "timeout_seconds": 30}),
    ("run_command", {"command": "sleep 1", "timeout_seconds": 0.5}),
    ("run_tests", {}),
    ("run_tests", {"timeout_seconds": 60}),
]


@pytest.mark.parametrize(("tool", "arguments"), VALID)
def test_the_values_are_the_models(tool: str, arguments: dict[str, Any]) -> None:
    plain = _plain(tool)(arguments)
    assert plain is not None, "the shortcut should vouch for these"
    model = MODELS[tool].model_validate(arguments)
    for field in type(model).model_fields:
        mine, theirs = getattr(plain, field), getattr(model, field)
        assert mine == theirs and type(mine) is type(theirs), (field, mine, theirs)
    assert set(plain._fields) == set(type(model).model_fields)


def test_every_built_in_tool_has_a_plain_path() -> None:
    assert set(SCHEMAS) == set(MODELS)
    for tool in MODELS:
        assert _plain(tool)._quick is not None, tool


@pytest.mark.parametrize(
    ("tool", "arguments"),
    [
        ("read_file", {"path": "a.py", "offset_line": 2.0}),  # an integer to JSON Schema
        ("write_file", {"path": "a", "content": "x", "expected_sha256": "absent\n"}),
        ("read_file", {"path": ""}),
        ("run_command", {"command": "ls", "timeout_seconds": 10**400}),
    ],
)
def test_anything_else_is_left_to_the_model(tool: str, arguments: dict[str, Any]) -> None:
    assert _plain(tool)(arguments) is None
    try:
        parsed = parse(tool, arguments)
    except ToolError:
        return  # the model refuses it, saying why
    model = MODELS[tool].model_validate(arguments)
    assert parsed == model


def test_the_arguments_are_frozen() -> None:
    plain = parse("read_file", {"path": "a.py"})
    with pytest.raises(AttributeError):
        plain.path = "b.py"


def test_valid_calls_of_the_built_in_tools_import_neither_jsonschema_nor_pydantic() -> None:
    """Each cost a fresh process (every `plait send`) 50-120 ms at its first tool call;
    arguments the schema's shortcut vouches for need neither, others still get both."""
    code = (
        "import sys\n"
        "from plait.adapters.tools._catalog import SPECS, parse\n"
        "from plait.application.arguments import argument_errors\n"
        "spec = next(s for s in SPECS if s.name == 'read_file')\n"
        "assert argument_errors(spec, {'path': 'a.py', 'offset_line': 2}) == []\n"
        "assert parse('read_file', {'path': 'a.py'}).offset_line == 1\n"
        "assert parse('run_command', {'command': 'ls', 'timeout_seconds': 2}).timeout_seconds"
        " == 2.0\n"
        "assert 'jsonschema' not in sys.modules, 'jsonschema imported'\n"
        "assert 'pydantic' not in sys.modules, 'pydantic imported'\n"
        "assert argument_errors(spec, {'path': ''}) != []\n"
        "assert 'jsonschema' in sys.modules\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_every_validator_of_the_models_has_its_plain_twin() -> None:
    """A validator added to a model must be applied on the plain path too (or the plain
    path would hand the executor a value the model would have changed or refused)."""
    from plait.adapters.tools._catalog import _NORMAL

    validated: set[tuple[str, str]] = set()
    for tool, model in MODELS.items():
        decorators = model.__pydantic_decorators__
        assert not decorators.model_validators, f"{tool}: the plain path cannot apply these"
        assert not decorators.field_serializers and not decorators.model_serializers, tool
        for found in decorators.field_validators.values():
            validated.update((tool, field) for field in found.info.fields)
    assert validated == set(_NORMAL)


def _values_of(sub: dict[str, Any]) -> Any:
    from hypothesis import strategies as st

    kind = sub["type"]
    if kind == "string":
        if "pattern" in sub:
            return st.from_regex(sub["pattern"], fullmatch=True)
        return st.text(min_size=sub.get("minLength", 0), max_size=sub.get("maxLength", 40))
    if kind == "boolean":
        return st.booleans()
    low = sub.get("minimum", sub.get("exclusiveMinimum"))
    high = sub.get("maximum", sub.get("exclusiveMaximum"))
    if kind == "integer":
        return st.integers(min_value=low, max_value=high)
    numbers = st.floats(
        min_value=low,
        max_value=high,
        exclude_min="exclusiveMinimum" in sub,
        exclude_max="exclusiveMaximum" in sub,
        allow_nan=False,
    )
    return numbers | st.integers(min_value=1, max_value=10**6)


def _arguments_of(tool: str) -> Any:
    from hypothesis import strategies as st

    schema = SCHEMAS[tool]
    required = set(schema.get("required", []))
    return st.fixed_dictionaries(
        {name: _values_of(sub) for name, sub in schema["properties"].items() if name in required},
        optional={
            name: _values_of(sub)
            for name, sub in schema["properties"].items()
            if name not in required
        },
    )


@pytest.mark.parametrize("tool", sorted(MODELS))
def test_the_values_are_the_models_for_any_valid_arguments(tool: str) -> None:
    from hypothesis import given, settings

    @settings(max_examples=150, deadline=None)
    @given(_arguments_of(tool))
    def check(arguments: dict[str, Any]) -> None:
        plain = _plain(tool)(arguments)
        if plain is None:  # left to the model, which decides
            return
        model = MODELS[tool].model_validate(arguments)  # it accepts what the plain path did
        for field in type(model).model_fields:
            mine, theirs = getattr(plain, field), getattr(model, field)
            assert mine == theirs and type(mine) is type(theirs), (field, mine, theirs)

    check()
