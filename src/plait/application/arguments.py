"""Checking a tool call's arguments against its tool's JSON Schema.

Validation is the maintained ``jsonschema`` library's, Draft 2020-12, for every tool
whatever its source (built-in, typed Python function, MCP server). A schema is checked once,
when its tool is registered (:class:`~plait.application.ports.Tool` does it): a schema
that is not valid Draft 2020-12, or that refers to a ``$ref`` plait cannot resolve, is a
configuration error naming the tool (the built-in tools' schemas, precomputed and checked
by a test, are checked by that test instead). A schema made only of the common keywords is
proven valid by a walk of its own (:mod:`._plain_schema`, ~100x cheaper than checking it
against the meta-schema); the validator is compiled at the tool's first call and kept per
spec.

The messages go back to the model as corrections, so each names the JSON path of the
value and says what was expected, briefly: values are shortened, never echoed whole.

This lives in the application layer, not the domain: the domain has no third-party
dependencies, and checking a call is a step of the loop (see :mod:`.validation`).
"""

from __future__ import annotations

import json
import operator
import re
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from copy import deepcopy
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from plait.application._plain_schema import plainly_valid
from plait.domain.errors import ValidationError
from plait.domain.tools import ToolSpec

if TYPE_CHECKING:
    from jsonschema.exceptions import ValidationError as SchemaViolation
    from jsonschema.protocols import Validator

__all__ = [
    "MAX_ERRORS",
    "ArgumentSchema",
    "argument_errors",
    "argument_schema",
    "cached_schemas",
    "check_at_registration",
    "known_valid",
]

MAX_ERRORS = 20
"""At most this many problems are reported for one call (the first ones, by path)."""
_SHORT = 60


def _multiple_of(
    validator: Any, divisor: float, instance: object, schema: Mapping[str, Any]
) -> Iterator[SchemaViolation]:
    """``multipleOf`` in exact decimal arithmetic: 0.3 is a multiple of 0.1 (in floats it
    is not, and jsonschema's check says so)."""
    if not validator.is_type(instance, "number"):
        return
    # lazy: fractions loads decimal (~3 ms of start-up); only a multipleOf check needs it
    from fractions import Fraction

    try:
        exact = (Fraction(repr(instance)) / Fraction(repr(divisor))).denominator == 1
    except (ValueError, OverflowError, ZeroDivisionError):  # inf, nan
        exact = False
    if not exact:
        from jsonschema.exceptions import (
            ValidationError as Violation,  # lazy: jsonschema costs ~0.1 s at start-up
        )

        yield Violation(f"{instance!r} is not a multiple of {divisor!r}")


@cache
def _validator_class() -> type[Validator]:
    # lazy: jsonschema is imported when the first schema is compiled (start-up, ~0.1 s)
    from jsonschema import Draft202012Validator, validators

    extended: type[Validator] = validators.extend(  # type: ignore[no-untyped-call]
        Draft202012Validator, {"multipleOf": _multiple_of}
    )
    return extended


_ANNOTATIONS = frozenset({"description", "title", "default", "examples", "$comment"})
"""Keywords that never make a value invalid."""
_SIMPLE_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "null": (type(None),),
    "array": (list,),
    "object": (dict,),
}
"""Exact Python types of JSON values that are certainly of each type (``1.0`` is an
integer too, and is left to jsonschema; ``bool`` is no subclass here: ``type(x) in``)."""

Quick = Callable[[object], bool]
Bound = Callable[[Any], bool]

_COMPARISONS: dict[str, Callable[[Any, Any], bool]] = {
    "minimum": operator.ge,
    "maximum": operator.le,
    "exclusiveMinimum": operator.gt,
    "exclusiveMaximum": operator.lt,
}


def _bound(kind: object, keyword: str, limit: object) -> Bound | None:
    """The check of one bound of a property of type ``kind``, as jsonschema checks it (a
    string's length in code points, ``pattern`` by ``re.search``, numbers compared as
    Python compares them); None for a keyword the shortcut leaves to jsonschema (one it
    does not know, one that does not apply to the type, a limit it cannot read)."""
    if kind == "string" and keyword in ("minLength", "maxLength"):
        if type(limit) is not int:
            return None
        if keyword == "minLength":
            return lambda value: len(value) >= limit
        return lambda value: len(value) <= limit
    if kind == "string" and keyword == "pattern":
        return _searcher(limit)
    compare = _COMPARISONS.get(keyword)
    if kind in ("integer", "number") and compare is not None:
        if type(limit) not in (int, float):
            return None
        return lambda value: compare(value, limit)
    return None


def _searcher(pattern: object) -> Bound | None:
    if not isinstance(pattern, str):
        return None
    try:
        search = re.compile(pattern).search
    except (re.error, RecursionError):
        return None
    return lambda value: search(value) is not None


def _bounds(sub: Mapping[str, Any]) -> list[Bound] | None:
    """The checks of a property's bounds (empty: none), or None when one of its keywords
    is left to jsonschema."""
    checks: list[Bound] = []
    for keyword, limit in sub.items():
        if keyword == "type" or keyword in _ANNOTATIONS:
            continue
        check = _bound(sub.get("type"), keyword, limit)
        if check is None:
            return None
        checks.append(check)
    return checks


def _quick_check(schema: object) -> Quick | None:
    """A shortcut for the most common shape of schema: an object whose properties each
    have one plain ``type`` (annotations aside) and at most the usual bounds of its type
    (``minLength``, ``maxLength``, ``pattern``; ``minimum``, ``maximum`` and their
    exclusive forms), ``required``, ``additionalProperties`` as a boolean: the built-in
    tools' schemas, and most others. It answers True only for arguments that are
    certainly valid (each value exactly of a Python type that JSON Schema's type accepts,
    within its bounds); everything else, and every other schema (``None``), goes to
    jsonschema, which decides and says why. Valid calls then never import jsonschema."""
    if not isinstance(schema, dict) or schema.get("type") != "object":
        return None
    if not set(schema) <= _ANNOTATIONS | {"type", "properties", "required", "additionalProperties"}:
        return None
    properties = schema.get("properties", {})
    required = schema.get("required", [])
    extra = schema.get("additionalProperties", True)
    if not isinstance(properties, dict) or not isinstance(extra, bool):
        return None
    if not isinstance(required, list) or not all(isinstance(r, str) for r in required):
        return None
    types: dict[str, tuple[type, ...]] = {}
    bounds: dict[str, list[Bound]] = {}
    for name, sub in properties.items():
        if not isinstance(sub, dict):
            return None
        wanted = _SIMPLE_TYPES.get(sub["type"]) if isinstance(sub.get("type"), str) else None
        checks = _bounds(sub)
        if wanted is None or checks is None:
            return None
        types[name] = wanted
        if checks:
            bounds[name] = checks
    needed = tuple(dict.fromkeys(required))

    def quick(arguments: object) -> bool:
        if type(arguments) is not dict:
            return False
        for name in needed:
            if name not in arguments:
                return False
        for name, value in arguments.items():
            wanted = types.get(name)
            if wanted is None:
                if not extra:
                    return False
            elif type(value) not in wanted:
                return False
        return True

    if not bounds:
        return quick

    def bounded(arguments: object) -> bool:
        if not quick(arguments):
            return False
        given = cast("dict[str, Any]", arguments)
        for name, checks in bounds.items():
            if name in given:
                value = given[name]
                for check in checks:
                    if not check(value):
                        return False
        return True

    return bounded


class ArgumentSchema:
    """A tool's argument schema, checked when built (a ValidationError naming the tool if
    it is not valid Draft 2020-12), compiled at its first use. Build it with
    :func:`argument_schema`."""

    __slots__ = ("_schema", "_validator", "quick", "tool")

    def __init__(self, tool: str, schema: Mapping[str, Any]) -> None:
        self.tool = tool
        if not plainly_valid(schema):
            _check_schema(tool, schema)
        self._schema = deepcopy(schema)  # later edits change nothing
        self._validator: Validator | None = None
        if isinstance(schema, Mapping):
            _check_refs(tool, schema)
        self.quick = _quick_check(self._schema)
        """The shortcut for this schema's certainly valid arguments (None: none)."""

    @property
    def validator(self) -> Validator:
        """The compiled validator (compiled on first use: registering a tool compiles
        nothing, and jsonschema's validator class is made when the first call is checked)."""
        validator = self._validator
        if validator is None:
            validator = self._validator = _validator_class()(self._schema)
        return validator

    def errors(self, arguments: object) -> list[str]:
        """What is wrong with ``arguments``, each naming its JSON path; empty when valid."""
        if self.quick is not None and self.quick(arguments):
            return []
        validator = self.validator
        try:
            if validator.is_valid(cast(Any, arguments)):  # the usual case, twice as fast
                return []
            found = sorted(validator.iter_errors(cast(Any, arguments)), key=_path_key)
        except RecursionError:
            return ["$: value is nested too deeply to validate"]
        messages = dict.fromkeys(m for error in found for m in _describe(error))
        return list(messages)[:MAX_ERRORS]  # jsonschema repeats some (e.g. 'required')


def _check_schema(tool: str, schema: Mapping[str, Any]) -> None:
    """The meta-schema's verdict on ``schema``: a ValidationError naming the tool and
    where the schema is wrong."""
    # lazy: jsonschema costs ~0.1 s at start-up
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import SchemaError

    try:  # the meta-schema's own validator (as the extended class's check would use)
        Draft202012Validator.check_schema(cast(Any, schema))
    except SchemaError as exc:
        where = _pointer(exc.absolute_path)
        raise ValidationError(
            f"tool {tool!r}: invalid parameters schema at {where}: {exc.message}", tool=tool
        ) from None


_cache: dict[int, tuple[ToolSpec, ArgumentSchema]] = {}
_cache_lock = threading.Lock()
_CACHE_SIZE = 4096


def argument_schema(spec: ToolSpec) -> ArgumentSchema:
    """The compiled schema of ``spec`` (compiled once per spec; raises
    a :class:`~plait.domain.errors.ValidationError` naming the tool for a bad schema)."""
    cached = _cache.get(id(spec))
    if cached is not None and cached[0] is spec:
        return cached[1]
    compiled = ArgumentSchema(spec.name, spec.parameters)
    with _cache_lock:
        if len(_cache) >= _CACHE_SIZE:  # specs come and go with MCP tool lists
            _cache.pop(next(iter(_cache)))
        _cache[id(spec)] = (spec, compiled)  # holding the spec keeps its id unique
    return compiled


_known_valid: set[str] = set()


def _canonical(schema: Mapping[str, Any]) -> str:
    return json.dumps(schema, sort_keys=True, separators=(",", ":"))


def known_valid(schemas: Iterable[Mapping[str, Any]]) -> None:
    """Mark ``schemas`` as already checked (the built-in tools' precomputed schemas, which
    a test checks): registering a tool with one of them compiles nothing."""
    _known_valid.update(_canonical(schema) for schema in schemas)


def cached_schemas(path: Path) -> dict[str, dict[str, Any]]:
    """The precomputed schemas in the JSON file ``path`` (tool name to schema, generated
    from the tools' argument models by ``scripts/tool_schemas.py`` and checked equal to
    them by a test), marked :func:`known_valid`."""
    schemas: dict[str, dict[str, Any]] = json.loads(path.read_text(encoding="utf-8"))
    known_valid(schemas.values())
    return schemas


def check_at_registration(spec: ToolSpec) -> None:
    """Refuse a bad schema when its tool is registered (a ValidationError naming the
    tool), compiling it then; a schema marked :func:`known_valid` is compiled at its first
    call instead: jsonschema is imported only when a call is checked (start-up time)."""
    known = _known_valid  # (empty until built-in tools load: nothing to serialize for)
    if known and isinstance(spec.parameters, Mapping) and _canonical(spec.parameters) in known:
        return
    argument_schema(spec)


def argument_errors(spec: ToolSpec, arguments: object) -> list[str]:
    """Errors of ``arguments`` against ``spec``'s schema; empty when valid."""
    return argument_schema(spec).errors(arguments)


# --- schema checks at registration ----------------------------------------------------------


def _check_refs(tool: str, schema: Mapping[str, Any]) -> None:
    """Every ``$ref`` must resolve inside the schema: plait never fetches a remote one."""
    refs = list(_refs(schema))
    if not refs:
        return
    # lazy: jsonschema's reference resolver, imported with it (start-up time)
    from referencing import Registry, Resource
    from referencing.exceptions import Unresolvable
    from referencing.jsonschema import DRAFT202012

    resource = Resource.from_contents(dict(schema), default_specification=DRAFT202012)
    resolver = Registry().with_resource("", resource).resolver()
    for ref in refs:
        try:
            resolver.lookup(ref)
        except Unresolvable:
            raise ValidationError(
                f"tool {tool!r}: invalid parameters schema: $ref {ref!r} does not resolve "
                "within the schema",
                tool=tool,
            ) from None


def _refs(node: object) -> Iterable[str]:
    if isinstance(node, Mapping):
        for key, value in node.items():
            if key in ("$ref", "$dynamicRef") and isinstance(value, str):
                yield value
            elif key not in ("enum", "const", "default", "examples"):
                yield from _refs(value)
    elif isinstance(node, list):
        for item in node:
            yield from _refs(item)


# --- messages -------------------------------------------------------------------------------


def _path_key(error: SchemaViolation) -> list[tuple[int, int, str]]:
    """Errors in a stable order: by path (array indexes numerically), then schema order."""
    return [(0, p, "") if isinstance(p, int) else (1, 0, str(p)) for p in error.absolute_path]


def _path(parts: Iterable[object]) -> str:
    text = "$"
    for part in parts:
        if isinstance(part, int):
            text += f"[{part}]"
        elif isinstance(part, str) and part.isidentifier():
            text += f".{part}"
        else:
            text += f"[{part!r}]"
    return text


def _pointer(parts: Iterable[object]) -> str:
    return "#/" + "/".join(str(p).replace("~", "~0").replace("/", "~1") for p in parts)


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= _SHORT else text[: _SHORT - 3] + "..."


def _type_name(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    names: dict[type, str] = {str: "string", list: "array", dict: "object"}
    return names.get(type(value), type(value).__name__)


def _count(number: int, word: str) -> str:
    if number == 1:
        return f"1 {word}"
    return f"{number} {word[:-1]}ies" if word.endswith("y") else f"{number} {word}s"


_SIZES = {
    "minLength": ("at least", "character", len),
    "maxLength": ("at most", "character", len),
    "minItems": ("at least", "item", len),
    "maxItems": ("at most", "item", len),
    "minProperties": ("at least", "property", len),
    "maxProperties": ("at most", "property", len),
}
_BOUNDS = {
    "minimum": "less than minimum",
    "maximum": "greater than maximum",
    "exclusiveMinimum": "not greater than exclusiveMinimum",
    "exclusiveMaximum": "not less than exclusiveMaximum",
    "multipleOf": "not a multiple of",
}


def _describe(error: SchemaViolation, where: str | None = None) -> list[str]:
    where = _path(error.absolute_path) if where is None else where
    value = error.instance
    if error.validator == "required" and isinstance(value, Mapping):
        required: Any = error.validator_value
        missing = [name for name in required if name not in value]
        return [f"{where}: missing required property {name!r}" for name in missing]
    if error.validator == "additionalProperties" and error.validator_value is False:
        extra = _unexpected(error)
        if extra:
            return [f"{where}: unexpected property {name!r}" for name in extra]
    return [f"{where}: {_reason(error)}"]


def _unexpected(error: SchemaViolation) -> list[str]:
    if not isinstance(error.instance, Mapping) or not isinstance(error.schema, Mapping):
        return []
    known = error.schema.get("properties", {})
    patterns = error.schema.get("patternProperties", {})
    return [
        str(name)
        for name in error.instance
        if name not in known and not any(re.search(p, str(name)) for p in patterns)
    ]


def _reason(error: SchemaViolation) -> str:
    keyword = error.validator
    value: Any = error.instance
    bound: Any = error.validator_value
    if keyword == "type":
        wanted = " or ".join(bound) if isinstance(bound, list) else str(bound)
        return f"expected {wanted}, got {_type_name(value)}"
    if keyword == "additionalProperties" and bound is False and _unexpected(error):
        return "; ".join(f"unexpected property {name!r}" for name in _unexpected(error))
    if keyword == "items" and bound is False and isinstance(value, list):
        allowed = len(error.schema.get("prefixItems", ())) if isinstance(error.schema, dict) else 0
        return f"expected at most {_count(allowed, 'item')}, got {len(value)}"
    if keyword in _SIZES:
        side, word, size = _SIZES[keyword]
        return f"expected {side} {_count(int(bound), word)}, got {size(value)}"
    if keyword in _BOUNDS:
        return f"{_short(value)} is {_BOUNDS[keyword]} {bound!r}"
    if keyword == "pattern":
        return f"{_short(value)} does not match pattern {bound!r}"
    if keyword == "enum":
        return f"{_short(value)} is not one of {_short(bound)}"
    if keyword == "const":
        return f"{_short(value)} is not equal to const {_short(bound)}"
    if keyword in ("anyOf", "oneOf"):
        if keyword == "oneOf" and not error.context:
            return "value matches more than one option in oneOf, expected exactly one"
        options: dict[int, list[str]] = {}
        for sub in error.context or ():
            index = sub.schema_path[0] if sub.schema_path else 0
            inner = list(sub.absolute_path)[len(error.absolute_path) :]
            reasons = _describe(sub, _path([*error.absolute_path, *inner]) if inner else "")
            options.setdefault(int(index), []).extend(r.removeprefix(": ") for r in reasons)
        parts = [f"option {i}: {'; '.join(why)}" for i, why in sorted(options.items())]
        return f"value does not match any schema in {keyword} ({'; '.join(parts)})"
    if keyword == "not":
        return "value must not match the 'not' schema"
    if keyword == "uniqueItems":
        return "items must be unique"
    if keyword == "contains":
        return "no item matches the 'contains' schema"
    if keyword is None and error.schema is False:
        return "no value is allowed here (schema is false)"
    message = str(error.message)
    return message if len(message) <= 200 else message[:197] + "..."
