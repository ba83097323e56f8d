"""A small, dependency-free JSON Schema validator for tool-call arguments.

Schemas are compiled once into a tree of closures, so validating an instance never walks the
schema dict. Supported keywords follow draft 2020-12 semantics; any keyword that is neither
supported nor a known annotation raises `SchemaError`, so a schema is never silently
under-enforced. Objects are `dict` and arrays are `list`/`tuple`, as produced by `json.loads`.
"""

from __future__ import annotations

import contextlib
import math
import re
from collections.abc import Callable, Mapping
from fractions import Fraction
from typing import Any
from urllib.parse import unquote

__all__ = ["MAX_ERRORS", "SchemaError", "Validator", "compile_schema"]

MAX_ERRORS = 20

Validator = Callable[[object], list[str]]
_Node = Callable[[object, str, list[str]], None]

# Annotations are accepted and ignored; any keyword in neither set raises SchemaError.
_ANNOTATIONS = frozenset({"title", "description", "default", "examples", "$schema", "$id",
    "$comment", "format", "deprecated", "readOnly", "writeOnly", "$defs", "definitions",
    "nullable"})  # fmt: skip
_SUPPORTED = frozenset({"type", "properties", "required", "additionalProperties", "items",
    "prefixItems", "enum", "const", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
    "multipleOf", "minLength", "maxLength", "pattern", "minItems", "maxItems", "uniqueItems",
    "minProperties", "maxProperties", "anyOf", "oneOf", "allOf", "not", "$ref"})  # fmt: skip
# JSON types checkable by isinstance alone; "integer" and "number" must also exclude bool.
_TYPE_CLASSES: dict[str, tuple[type, ...]] = {
    "object": (dict,), "array": (list, tuple), "string": (str,), "boolean": (bool,),
    "null": (type(None),), "integer": (), "number": (),
}  # fmt: skip
_TYPE_NAMES: dict[type, str] = {
    type(None): "null", bool: "boolean", int: "integer", float: "number", str: "string",
    list: "array", tuple: "array", dict: "object",
}  # fmt: skip
_BOUNDS: tuple[tuple[str, Callable[[Any, Any], bool], str], ...] = (
    ("minimum", lambda v, b: v >= b, "less than minimum"),
    ("maximum", lambda v, b: v <= b, "greater than maximum"),
    ("exclusiveMinimum", lambda v, b: v > b, "not greater than exclusiveMinimum"),
    ("exclusiveMaximum", lambda v, b: v < b, "not less than exclusiveMaximum"),
    ("multipleOf", lambda v, b: _is_multiple(v, b), "not a multiple of"),
)
_SIZES: tuple[tuple[str, tuple[type, ...], str], ...] = (
    ("Length", (str,), "character"),
    ("Items", (list, tuple), "item"),
    ("Properties", (dict,), "property"),
)


class SchemaError(ValueError):
    """The schema itself is invalid or uses an unsupported keyword.

    The message names the keyword and the JSON pointer of the schema object containing it.
    """


class _Stop(Exception):
    """Raised internally once an error list reaches MAX_ERRORS."""


def _add(errors: list[str], message: str) -> None:
    errors.append(message)
    if len(errors) >= MAX_ERRORS:
        raise _Stop


def _accept(instance: object, path: str, errors: list[str]) -> None:
    return None


def _reject(instance: object, path: str, errors: list[str]) -> None:
    _add(errors, f"{path}: no value is allowed here (schema is false)")


def _run(node: _Node, instance: object, path: str) -> list[str]:
    errors: list[str] = []
    with contextlib.suppress(_Stop):
        node(instance, path, errors)
    return errors


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _is_integer(value: object) -> bool:
    if isinstance(value, int):
        return not isinstance(value, bool)
    return isinstance(value, float) and value.is_integer()


def _type_name(value: object) -> str:
    return _TYPE_NAMES.get(type(value), type(value).__name__)


def _json_key(value: object) -> object:
    """A hashable key with JSON equality: True != 1, 1 == 1.0, containers compared deeply."""
    if isinstance(value, bool):
        return (0, value)
    if isinstance(value, (list, tuple)):
        return (1, tuple(_json_key(item) for item in value))
    if isinstance(value, dict):
        return (2, frozenset((key, _json_key(item)) for key, item in value.items()))
    return value


def _short(value: object, limit: int = 100) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _noun(n: int, word: str) -> str:
    if n == 1:
        return f"1 {word}"
    return f"{n} {word[:-1]}ies" if word.endswith("y") else f"{n} {word}s"


def _segment(name: str) -> str:
    return f".{name}" if name.isidentifier() else f"[{name!r}]"


def _is_multiple(value: float, divisor: float) -> bool:
    if isinstance(value, int) and isinstance(divisor, int):
        return value % divisor == 0
    if isinstance(value, float) and not math.isfinite(value):
        return False
    # Exact arithmetic on the shortest repr, so that 0.3 counts as a multiple of 0.1.
    return (Fraction(repr(value)) / Fraction(repr(divisor))).denominator == 1


def _seq(checks: list[_Node]) -> _Node:
    if not checks:
        return _accept
    if len(checks) == 1:
        return checks[0]
    frozen = tuple(checks)

    def chain(instance: object, path: str, errors: list[str]) -> None:
        for check in frozen:
            check(instance, path, errors)

    return chain


class _Cell:
    """Late-bound target of a `$ref`, so recursive definitions can refer to themselves."""

    __slots__ = ("depth", "node")

    def __init__(self, depth: int) -> None:
        self.node: _Node = _accept
        self.depth = depth  # instance depth while being compiled; -1 once done


class _Compiler:
    def __init__(self, root: object) -> None:
        self.root = root
        self.cells: dict[str, _Cell] = {}
        self.depth = 0  # number of enclosing keywords that descend into a child value

    def cell(self, ref: str, target: object) -> _Cell:
        cell = self.cells[ref] = _Cell(self.depth)
        cell.node = self.compile(target, ref)
        cell.depth = -1
        return cell

    def child(self, schema: object, ptr: str) -> _Node:
        """Compile a subschema that applies to a child (property or item) of the value."""
        self.depth += 1
        try:
            return self.compile(schema, ptr)
        finally:
            self.depth -= 1

    def compile(self, schema: object, ptr: str) -> _Node:
        if isinstance(schema, bool):
            return _accept if schema else _reject
        if not isinstance(schema, Mapping):
            raise SchemaError(f"schema at {ptr} must be an object or boolean, got {schema!r}")
        for key in schema:
            if key not in _SUPPORTED and key not in _ANNOTATIONS:
                raise SchemaError(f"unsupported keyword {key!r} at {ptr}")
        for key in ("$defs", "definitions"):
            if not isinstance(schema.get(key, {}), Mapping):
                raise SchemaError(f"invalid {key!r} at {ptr}: expected an object")
        checks: list[_Node] = []
        if "$ref" in schema:
            checks.append(self.ref(schema["$ref"], ptr))
        if "type" in schema:
            checks.append(_type_check(schema["type"], ptr))
        if "enum" in schema:
            if not isinstance(schema["enum"], list):
                raise SchemaError(f"invalid 'enum' at {ptr}: expected an array")
            checks.append(_enum_check(schema["enum"], f"is not one of {_short(schema['enum'])}"))
        if "const" in schema:
            const = schema["const"]
            checks.append(_enum_check([const], f"is not equal to const {_short(const)}"))
        for key, ok, reason in _BOUNDS:
            if key in schema:
                bound = schema[key]
                if not _is_number(bound) or (key == "multipleOf" and bound <= 0):
                    raise SchemaError(f"invalid {key!r} at {ptr}: expected a (positive) number")
                checks.append(_bound_check(bound, ok, reason))
        for suffix, classes, word in _SIZES:
            low, high = (
                self.limit(schema, "min" + suffix, ptr),
                self.limit(schema, "max" + suffix, ptr),
            )
            if low is not None or high is not None:
                checks.append(_size_check(classes, low, high, word))
        if "pattern" in schema:
            checks.append(_pattern_check(schema["pattern"], ptr))
        if schema.get("uniqueItems", False) is not False:
            if schema["uniqueItems"] is not True:
                raise SchemaError(f"invalid 'uniqueItems' at {ptr}: expected a boolean")
            checks.append(_unique_check)
        self.array(checks, schema, ptr)
        self.object(checks, schema, ptr)
        for key in ("allOf", "anyOf", "oneOf"):
            if key in schema:
                branches = schema[key]
                if not isinstance(branches, list) or not branches:
                    raise SchemaError(f"invalid {key!r} at {ptr}: expected a non-empty array")
                nodes = [self.compile(sub, f"{ptr}/{key}/{i}") for i, sub in enumerate(branches)]
                checks.append(_seq(nodes) if key == "allOf" else _branch_check(key, nodes))
        if "not" in schema:
            checks.append(_branch_check("not", [self.compile(schema["not"], f"{ptr}/not")]))
        return _seq(checks)

    @staticmethod
    def limit(schema: Mapping[str, Any], key: str, ptr: str) -> int | None:
        if key not in schema:
            return None
        value = schema[key]
        if not _is_integer(value) or value < 0:
            raise SchemaError(f"invalid {key!r} at {ptr}: expected a non-negative integer")
        return int(value)

    def ref(self, ref: object, ptr: str) -> _Node:
        if not isinstance(ref, str):
            raise SchemaError(f"invalid '$ref' at {ptr}: expected a string")
        if ref != "#" and not ref.startswith(("#/$defs/", "#/definitions/")):
            raise SchemaError(
                f"unsupported '$ref' {ref!r} at {ptr}: only '#', '#/$defs/...' and "
                "'#/definitions/...' are supported"
            )
        cell = self.cells.get(ref)
        if cell is None:
            target: object = self.root
            for token in ref[2:].split("/") if ref != "#" else []:
                token = unquote(token).replace("~1", "/").replace("~0", "~")
                if not isinstance(target, Mapping) or token not in target:
                    raise SchemaError(f"unresolvable '$ref' {ref!r} at {ptr}")
                target = target[token]
            cell = self.cell(ref, target)
        elif cell.depth == self.depth:
            raise SchemaError(f"circular '$ref' {ref!r} at {ptr} never descends into the value")
        found = cell

        def check(instance: object, path: str, errors: list[str]) -> None:
            found.node(instance, path, errors)

        return check

    def array(self, checks: list[_Node], schema: Mapping[str, Any], ptr: str) -> None:
        prefix: list[_Node] = []
        if "prefixItems" in schema:
            raw = schema["prefixItems"]
            if not isinstance(raw, list) or not raw:
                raise SchemaError(f"invalid 'prefixItems' at {ptr}: expected a non-empty array")
            prefix = [self.child(sub, f"{ptr}/prefixItems/{i}") for i, sub in enumerate(raw)]
        rest: _Node | None = None
        if "items" in schema:
            if isinstance(schema["items"], list):
                raise SchemaError(f"invalid 'items' at {ptr}: use 'prefixItems' for tuples")
            rest = self.child(schema["items"], f"{ptr}/items")
        if prefix or rest is not None:
            checks.append(_items_check(prefix, rest))

    def object(self, checks: list[_Node], schema: Mapping[str, Any], ptr: str) -> None:
        raw = schema.get("properties", {})
        if not isinstance(raw, Mapping):
            raise SchemaError(f"invalid 'properties' at {ptr}: expected an object")
        props: dict[str, tuple[_Node, str]] = {}
        for name, sub in raw.items():
            escaped = name.replace("~", "~0").replace("/", "~1")
            props[name] = (self.child(sub, f"{ptr}/properties/{escaped}"), _segment(name))
        required = schema.get("required", [])
        if (
            not isinstance(required, list)
            or not all(isinstance(name, str) for name in required)
            or len(set(required)) != len(required)
        ):
            raise SchemaError(f"invalid 'required' at {ptr}: expected an array of unique strings")
        extra: _Node | bool = schema.get("additionalProperties", True)
        if not isinstance(extra, bool):
            extra = self.child(extra, f"{ptr}/additionalProperties")
        if props or required or extra is not True:
            checks.append(_object_check(props, tuple(required), extra))


def _type_check(value: object, ptr: str) -> _Node:
    names = [value] if isinstance(value, str) else value
    if not isinstance(names, list) or not names or len(set(map(str, names))) != len(names):
        raise SchemaError(f"invalid 'type' at {ptr}: expected a type name or a unique list")
    for name in names:
        if name not in _TYPE_CLASSES:
            raise SchemaError(f"invalid 'type' at {ptr}: unknown type {name!r}")
    classes = tuple(cls for name in names for cls in _TYPE_CLASSES[name])
    number, integer = "number" in names, "integer" in names
    expected = " or ".join(names)

    def check(instance: object, path: str, errors: list[str]) -> None:
        if not (
            isinstance(instance, classes)
            or (number and _is_number(instance))
            or (integer and _is_integer(instance))
        ):
            _add(errors, f"{path}: expected {expected}, got {_type_name(instance)}")

    return check


def _enum_check(values: list[object], reason: str) -> _Node:
    keys = frozenset(_json_key(value) for value in values)

    def check(instance: object, path: str, errors: list[str]) -> None:
        if _json_key(instance) not in keys:
            _add(errors, f"{path}: {_short(instance)} {reason}")

    return check


def _bound_check(bound: float, ok: Callable[[Any, Any], bool], reason: str) -> _Node:
    def check(instance: object, path: str, errors: list[str]) -> None:
        if _is_number(instance) and not ok(instance, bound):
            _add(errors, f"{path}: {instance!r} is {reason} {bound!r}")

    return check


def _pattern_check(source: object, ptr: str) -> _Node:
    if not isinstance(source, str):
        raise SchemaError(f"invalid 'pattern' at {ptr}: expected a string")
    try:
        search = re.compile(source).search
    except re.error as exc:
        raise SchemaError(f"invalid 'pattern' at {ptr}: {source!r}: {exc}") from None

    def check(instance: object, path: str, errors: list[str]) -> None:
        if isinstance(instance, str) and search(instance) is None:
            _add(errors, f"{path}: {_short(instance)} does not match pattern {source!r}")

    return check


def _size_check(classes: tuple[type, ...], low: int | None, high: int | None, word: str) -> _Node:
    def check(instance: object, path: str, errors: list[str]) -> None:
        if isinstance(instance, classes):
            size = len(instance)  # type: ignore[arg-type]
            if low is not None and size < low:
                _add(errors, f"{path}: expected at least {_noun(low, word)}, got {size}")
            elif high is not None and size > high:
                _add(errors, f"{path}: expected at most {_noun(high, word)}, got {size}")

    return check


def _items_check(prefix: list[_Node], rest: _Node | None) -> _Node:
    count = len(prefix)

    def check(instance: object, path: str, errors: list[str]) -> None:
        if not isinstance(instance, (list, tuple)):
            return
        for index, (node, item) in enumerate(zip(prefix, instance, strict=False)):
            node(item, f"{path}[{index}]", errors)
        if rest is None or len(instance) <= count:
            return
        if rest is _reject:
            _add(errors, f"{path}: expected at most {_noun(count, 'item')}, got {len(instance)}")
            return
        for index in range(count, len(instance)):
            rest(instance[index], f"{path}[{index}]", errors)

    return check


def _unique_check(instance: object, path: str, errors: list[str]) -> None:
    if isinstance(instance, (list, tuple)):
        seen: dict[object, int] = {}
        for index, item in enumerate(instance):
            first = seen.setdefault(_json_key(item), index)
            if first != index:
                _add(errors, f"{path}: items at index {first} and {index} are equal")
                return


def _object_check(
    props: dict[str, tuple[_Node, str]], required: tuple[str, ...], extra: _Node | bool
) -> _Node:
    lookup = props.get

    def check(instance: object, path: str, errors: list[str]) -> None:
        if not isinstance(instance, dict):
            return
        for name in required:
            if name not in instance:
                _add(errors, f"{path}: missing required property {name!r}")
        for key, value in instance.items():
            found = lookup(key)
            if found is not None:
                found[0](value, path + found[1], errors)
            elif extra is False:
                _add(errors, f"{path}: unexpected property {key!r}")
            elif extra is not True:
                extra(value, path + _segment(str(key)), errors)

    return check


def _branch_check(keyword: str, branches: list[_Node]) -> _Node:
    """anyOf (some branch matches), oneOf (exactly one matches) or not (its one branch fails)."""
    any_of = keyword == "anyOf"

    def check(instance: object, path: str, errors: list[str]) -> None:
        reasons: list[str] = []
        matched: list[int] = []
        for index, branch in enumerate(branches):
            found = _run(branch, instance, path)
            if found:
                reasons.append(f"option {index}: {found[0].removeprefix(path + ': ')}")
            elif any_of:
                return
            else:
                matched.append(index)
        if keyword == "not":
            if matched:
                _add(errors, f"{path}: value must not match the 'not' schema")
        elif not matched:
            reasons_text = "; ".join(reasons)
            _add(errors, f"{path}: value does not match any schema in {keyword} ({reasons_text})")
        elif len(matched) > 1:
            shown = ", ".join(map(str, matched))
            _add(errors, f"{path}: value matches options {shown} in oneOf, expected exactly one")

    return check


def compile_schema(schema: Mapping[str, Any] | bool) -> Validator:
    """Compile once; the returned callable validates a decoded JSON value.

    It returns human-readable errors (an empty list means valid), each naming the location as
    a JSON-pointer-ish path such as "$.path[0].name"; at most MAX_ERRORS are reported.
    Raises SchemaError if the schema is invalid or uses an unsupported keyword.
    """
    root = _Compiler(schema).cell("#", schema).node

    def validate(instance: object) -> list[str]:
        errors: list[str] = []
        try:
            root(instance, "$", errors)
        except _Stop:
            pass
        except RecursionError:
            errors.append("$: value is nested too deeply to validate")
        return errors

    return validate
