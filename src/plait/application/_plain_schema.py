"""A cheap proof that a tool's parameters schema is valid Draft 2020-12, for the schemas
tools usually have.

Checking a schema against the Draft 2020-12 meta-schema with ``jsonschema`` costs about
1.5 ms (the meta-schema is seven vocabularies joined through ``$dynamicRef``), paid for
every tool a process registers, before its first run can start. Most tool schemas use a
handful of keywords whose values the meta-schema constrains only by their JSON type
(``type``, ``properties``, ``required``, ``items``, ``enum``, ``description``...).

:func:`plainly_valid` walks such a schema and says True only when every keyword it meets
is one it knows and every value has the shape the meta-schema demands of it, which is then
a proof the schema is valid. Anything else (a keyword it does not know, ``$ref``,
``pattern`` whose regex the meta-schema's format check compiles, a float where an integer
is wanted...) makes it answer False: the caller then asks ``jsonschema``, which gives the
verdict and the error message. So it never accepts a schema ``jsonschema`` would refuse
(a test compares the two), it only spares the common case the meta-schema walk.
"""

from __future__ import annotations

from typing import Any

__all__ = ["plainly_valid"]

_SIMPLE_TYPES = frozenset(("array", "boolean", "integer", "null", "number", "object", "string"))

# keyword -> what the meta-schema requires of its value
_SCHEMA = "schema"
_SCHEMA_MAP = "schema map"
_SCHEMA_LIST = "non-empty schema list"
_STRING = "string"
_BOOLEAN = "boolean"
_NUMBER = "number"
_POSITIVE = "positive number"
_COUNT = "non-negative integer"
_ANY = "anything"
_LIST = "array"
_TYPE = "type"
_STRINGS = "unique strings"

_KEYWORDS: dict[str, str] = {
    # applicator
    "properties": _SCHEMA_MAP,
    "additionalProperties": _SCHEMA,
    "items": _SCHEMA,
    "prefixItems": _SCHEMA_LIST,
    "contains": _SCHEMA,
    "propertyNames": _SCHEMA,
    "if": _SCHEMA,
    "then": _SCHEMA,
    "else": _SCHEMA,
    "allOf": _SCHEMA_LIST,
    "anyOf": _SCHEMA_LIST,
    "oneOf": _SCHEMA_LIST,
    "not": _SCHEMA,
    # validation
    "type": _TYPE,
    "const": _ANY,
    "enum": _LIST,
    "multipleOf": _POSITIVE,
    "maximum": _NUMBER,
    "exclusiveMaximum": _NUMBER,
    "minimum": _NUMBER,
    "exclusiveMinimum": _NUMBER,
    "maxLength": _COUNT,
    "minLength": _COUNT,
    "maxItems": _COUNT,
    "minItems": _COUNT,
    "uniqueItems": _BOOLEAN,
    "maxContains": _COUNT,
    "minContains": _COUNT,
    "maxProperties": _COUNT,
    "minProperties": _COUNT,
    "required": _STRINGS,
    # meta-data, format annotation, core's comment
    "title": _STRING,
    "description": _STRING,
    "default": _ANY,
    "deprecated": _BOOLEAN,
    "readOnly": _BOOLEAN,
    "writeOnly": _BOOLEAN,
    "examples": _LIST,
    "format": _STRING,
    "$comment": _STRING,
}

_MAX_DEPTH = 64
"""Deeper than this, ``jsonschema`` decides (it reports a schema nested too deeply)."""


def plainly_valid(schema: object) -> bool:
    """True only if ``schema`` is certainly a valid Draft 2020-12 schema (see the module's
    docstring); False means "not proven here", not "invalid"."""
    return _schema(schema, 0)


def _schema(node: object, depth: int) -> bool:
    if isinstance(node, bool):
        return True
    if not isinstance(node, dict) or depth > _MAX_DEPTH:
        return False
    for keyword, value in node.items():
        rule = _KEYWORDS.get(keyword) if isinstance(keyword, str) else None
        if rule is None or not _value(rule, value, depth + 1):
            return False
    return True


def _value(rule: str, value: Any, depth: int) -> bool:
    if rule == _SCHEMA:
        return _schema(value, depth)
    if rule == _SCHEMA_MAP:
        return isinstance(value, dict) and all(
            isinstance(name, str) and _schema(sub, depth) for name, sub in value.items()
        )
    if rule == _SCHEMA_LIST:
        return isinstance(value, list) and bool(value) and all(_schema(s, depth) for s in value)
    if rule == _TYPE:
        if isinstance(value, str):
            return value in _SIMPLE_TYPES
        return (
            isinstance(value, list)
            and bool(value)
            and all(isinstance(name, str) and name in _SIMPLE_TYPES for name in value)
            and len(set(value)) == len(value)
        )
    if rule == _STRINGS:
        return (
            isinstance(value, list)
            and all(isinstance(name, str) for name in value)
            and len(set(value)) == len(value)
        )
    if rule == _STRING:
        return isinstance(value, str)
    if rule == _BOOLEAN:
        return isinstance(value, bool)
    if rule == _COUNT:
        return type(value) is int and value >= 0
    if rule in (_NUMBER, _POSITIVE):
        if isinstance(value, bool) or not isinstance(value, int | float):
            return False
        return rule == _NUMBER or value > 0
    if rule == _LIST:
        return isinstance(value, list)
    return rule == _ANY
