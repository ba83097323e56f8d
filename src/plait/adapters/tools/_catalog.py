"""What the model is told about the built-in tools, without importing their typed
arguments models (pydantic, ~0.1 s of start-up): names, descriptions, effect classes, and
the JSON schemas precomputed from the models (:mod:`._specs`, the one source of truth) into
``_schemas.json``. A call's arguments are made into the values its executor reads by
:func:`parse`: from the schema alone when they certainly satisfy it (the usual case, and
no pydantic then), else by the typed model, which decides and says what is wrong."""

from __future__ import annotations

from collections import namedtuple
from collections.abc import Callable, Mapping
from functools import cache
from pathlib import Path
from typing import Any

from plait.adapters.tools._values import ABSENT, MAX_COMMAND_CHARS, plain_sha256
from plait.application.arguments import ArgumentSchema, cached_schemas
from plait.domain.tools import EffectClass, ToolSpec

__all__ = ["ABSENT", "MAX_COMMAND_CHARS", "SCHEMAS", "SPECS", "parse"]

SCHEMAS = cached_schemas(Path(__file__).with_name("_schemas.json"))
"""Each built-in tool's argument schema, by tool name."""

_READ, _WRITE = EffectClass.READ_ONLY, EffectClass.SIDE_EFFECT

_DESCRIPTIONS: list[tuple[str, str, EffectClass]] = [
    (
        "read_file",
        "Read a UTF-8 text file of the workspace, whole or a range of lines. Returns the "
        "content as is (no line numbers), then one bracketed line saying which lines were "
        "shown, whether more follows (and the offset_line to continue with) and, when the "
        "end was reached, the file's sha256 (usable as write_file's expected_sha256). "
        "Binary files are refused.",
        _READ,
    ),
    (
        "list_dir",
        "List a workspace directory, one entry per line, sorted. Directories end in '/', "
        "symbolic links in '@'. Recursive listings show paths relative to the listed "
        "directory, do not enter .git or links, and stop after a bounded number of entries "
        "(said at the end).",
        _READ,
    ),
    (
        "search_text",
        "Find lines containing a string (or matching a regular expression, RE2 syntax: "
        "Python's without lookaround and backreferences) in the "
        "workspace's text files. Returns 'path:line: text' per matching line, paths relative "
        "to the workspace root. Skips binary files, .git and symbolic links; stops after "
        "max_results matches and says so.",
        _READ,
    ),
    (
        "write_file",
        "Create or overwrite a workspace file with the given UTF-8 content, creating missing "
        "parent directories; the write is atomic. Pass expected_sha256 to make it a "
        "compare-and-write: it happens only if the file still has that sha256 (or, with "
        "'absent', does not exist yet) — and if the file already holds exactly this content "
        "the call succeeds as 'already written', so retrying is safe. Returns the bytes "
        "written and the new sha256.",
        _WRITE,
    ),
    (
        "edit_file",
        "Replace an exact string in a UTF-8 workspace file. old_string must occur exactly "
        "once (include surrounding lines to make it unique) unless replace_all is true. The "
        "file is rewritten atomically. Returns the number of replacements and the new sha256.",
        _WRITE,
    ),
]

SPECS: list[ToolSpec] = [
    ToolSpec(name=name, description=text, parameters=SCHEMAS[name], effect=effect)
    for name, text, effect in _DESCRIPTIONS
]
"""Each workspace tool's spec."""


@cache
def _models() -> Mapping[str, Any]:
    # lazy: the typed models import pydantic (~180 ms): at the first call, not when tools are built
    from plait.adapters.tools._specs import MODELS

    return MODELS


def parse(tool: str, arguments: Mapping[str, Any]) -> Any:
    """``arguments`` (already checked against the schema) as the values ``tool``'s
    executor reads, each argument an attribute: made from the schema when the arguments
    certainly satisfy it (:class:`_Plain`), else parsed into the tool's model (a rule the
    schema does not carry raises :class:`~plait.domain.errors.ToolError`)."""
    plain = _plain(tool)(arguments)
    if plain is not None:
        return plain
    # lazy: pydantic (~0.1 s), see _models
    from plait.application.typed_tools import parse_arguments

    return parse_arguments(_models()[tool], arguments)


_NORMAL: dict[tuple[str, str], Callable[[Any], Any]] = {
    ("write_file", "expected_sha256"): plain_sha256,
}
"""The models' validators that change a valid value (tool, argument), as functions they
share with the models."""
_MISSING = object()


class _Plain:
    """A built-in tool's arguments made into its executor's values without its model,
    for arguments the schema's shortcut vouches for (:attr:`ArgumentSchema.quick`: each
    value of its exact type, within its bounds): each argument given, else the schema's
    default, else None (the model's optional arguments default to None); a number as a
    float, as the model makes it; the model's normalizing validators applied (a value one
    refuses, or a number no float holds, leaves the arguments to the model, which says
    why). The same values as the model's (``tests/tools/test_plain_arguments.py``
    compares them), frozen like it."""

    __slots__ = ("_fields", "_quick", "_record")

    def __init__(self, tool: str, schema: Mapping[str, Any]) -> None:
        self._quick = ArgumentSchema(tool, schema).quick
        properties: Mapping[str, Any] = schema.get("properties", {})
        self._record = namedtuple(f"{tool}_arguments", list(properties))  # type: ignore[misc]
        self._fields = [
            (
                name,
                sub.get("default"),
                float if sub.get("type") == "number" else None,
                _NORMAL.get((tool, name)),
            )
            for name, sub in properties.items()
        ]

    def __call__(self, arguments: Mapping[str, Any]) -> Any:
        if self._quick is None or not self._quick(arguments):
            return None
        values = []
        for name, default, number, normal in self._fields:
            value = arguments.get(name, _MISSING)
            try:
                if value is _MISSING:
                    value = default
                elif number is not None:
                    value = number(value)  # an integer too large for a float: the model's
                if normal is not None and value is not None:
                    value = normal(value)
            except (ValueError, OverflowError):
                return None
            values.append(value)
        return self._record(*values)


@cache
def _plain(tool: str) -> _Plain:
    return _Plain(tool, SCHEMAS[tool])
