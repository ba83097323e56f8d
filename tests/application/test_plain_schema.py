"""The registration-time shortcut for common tool schemas (plait.application._plain_schema):
it must never accept a schema the Draft 2020-12 meta-schema refuses, and registering a tool
with a common schema must not pay for the meta-schema walk."""

from __future__ import annotations

import random
from typing import Any

import jsonschema
import pytest

from plait.application import arguments
from plait.application._plain_schema import plainly_valid
from plait.application.arguments import ArgumentSchema, argument_schema
from plait.application.ports import Tool, ToolInvocation, ToolOutput
from plait.domain.errors import ValidationError
from plait.domain.tools import ToolSpec


def meta_valid(schema: object) -> bool:
    try:
        jsonschema.Draft202012Validator.check_schema(schema)  # type: ignore[arg-type]
    except jsonschema.SchemaError:
        return False
    return True


COMMON: list[Any] = [
    True,
    False,
    {},
    {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
    {
        "type": "object",
        "title": "Args",
        "description": "what the tool takes",
        "properties": {
            "path": {"type": "string", "description": "a file", "minLength": 1},
            "mode": {"enum": ["r", "w"], "default": "r"},
            "count": {"type": "integer", "minimum": 0, "maximum": 10, "default": 1},
            "ratio": {"type": "number", "exclusiveMinimum": 0, "multipleOf": 0.5},
            "tags": {"type": "array", "items": {"type": "string"}, "uniqueItems": True},
            "maybe": {"anyOf": [{"type": "string"}, {"type": "null"}], "default": None},
            "either": {"type": ["string", "null"], "examples": ["a"]},
            "pair": {"prefixItems": [{"type": "integer"}, True], "items": False},
            "meta": {"type": "object", "additionalProperties": {"type": "string"}},
            "fixed": {"const": {"a": [1, 2]}, "deprecated": True, "readOnly": False},
            "when": {"type": "string", "format": "date-time", "$comment": "ISO 8601"},
        },
        "required": ["path"],
        "additionalProperties": False,
        "minProperties": 1,
    },
    {"allOf": [{"type": "object"}, {"not": {"required": ["x"]}}], "oneOf": [True, {}]},
    {"if": {"properties": {"a": {"const": 1}}}, "then": {"required": ["b"]}, "else": {}},
    {"type": "array", "contains": {"type": "integer"}, "minContains": 2, "maxContains": 3},
    {"type": "object", "propertyNames": {"maxLength": 5}, "maxProperties": 3},
]

REFUSED: list[Any] = [
    {"type": "strng"},
    {"type": []},
    {"type": ["string", "string"]},
    {"type": 3},
    {"required": "x"},
    {"required": ["a", "a"]},
    {"required": [1]},
    {"properties": {"a": 3}},
    {"properties": []},
    {"minLength": -1},
    {"minLength": True},
    {"maxItems": "3"},
    {"anyOf": []},
    {"anyOf": {}},
    {"items": [{}]},
    {"multipleOf": 0},
    {"multipleOf": -2},
    {"minimum": "0"},
    {"minimum": False},
    {"enum": "ab"},
    {"examples": {}},
    {"description": 3},
    {"uniqueItems": 1},
    {"not": None},
    {"properties": {"p": {"pattern": "(unclosed"}}},
    {"$ref": 3},
    [],
    3,
    None,
]


@pytest.mark.parametrize("schema", COMMON)
def test_common_schemas_are_proven_valid(schema: Any) -> None:
    assert plainly_valid(schema)
    assert meta_valid(schema)


@pytest.mark.parametrize("schema", REFUSED)
def test_what_the_meta_schema_refuses_is_never_proven_valid(schema: Any) -> None:
    assert not meta_valid(schema)
    assert not plainly_valid(schema)


@pytest.mark.parametrize(
    "schema",
    [
        {"properties": {"p": {"pattern": "^a"}}},  # the regex is the meta-schema's to check
        {"$ref": "#/$defs/a", "$defs": {"a": {}}},
        {"minLength": 2.0},  # an integral float: valid, but left to jsonschema
        {"nullable": True},  # an unknown keyword: valid, but left to jsonschema
        {"unevaluatedProperties": False},
    ],
)
def test_valid_schemas_outside_the_subset_are_left_to_jsonschema(schema: Any) -> None:
    assert meta_valid(schema)
    assert not plainly_valid(schema)


_VALUES: list[Any] = [
    None,
    True,
    False,
    0,
    -1,
    2,
    2.5,
    -0.5,
    float("nan"),
    "",
    "string",
    "integer",
    "strng",
    [],
    ["string"],
    ["string", "string"],
    ["a", 1],
    [{}],
    {},
    {"a": {}},
    {"a": 1},
]
_KEYWORDS = [
    "type",
    "properties",
    "required",
    "items",
    "prefixItems",
    "additionalProperties",
    "anyOf",
    "allOf",
    "not",
    "enum",
    "const",
    "minimum",
    "multipleOf",
    "minLength",
    "maxItems",
    "uniqueItems",
    "description",
    "default",
    "examples",
    "format",
    "deprecated",
    "contains",
    "pattern",
    "$ref",
    "nullable",
]


def _random_schema(rng: random.Random, depth: int) -> Any:
    if depth > 3 or rng.random() < 0.15:
        return rng.choice([True, False, {}, {"type": "string"}])
    schema: dict[str, Any] = {}
    for keyword in rng.sample(_KEYWORDS, rng.randint(1, 4)):
        roll = rng.random()
        if roll < 0.3:
            value: Any = _random_schema(rng, depth + 1)
        elif roll < 0.45:
            value = {"a": _random_schema(rng, depth + 1), "b": _random_schema(rng, depth + 1)}
        elif roll < 0.6:
            value = [_random_schema(rng, depth + 1) for _ in range(rng.randint(0, 2))]
        else:
            value = rng.choice(_VALUES)
        schema[keyword] = value
    return schema


def test_never_accepts_what_the_meta_schema_refuses_on_random_schemas() -> None:
    rng = random.Random(27)
    proven = refused = 0
    for _ in range(4000):
        schema = _random_schema(rng, 0)
        if plainly_valid(schema):
            proven += 1
            assert meta_valid(schema), schema
        elif not meta_valid(schema):
            refused += 1
    assert proven > 400 and refused > 400, (proven, refused)  # both sides were exercised


async def _echo(invocation: ToolInvocation) -> ToolOutput:
    return ToolOutput(content="")


def test_registering_a_tool_with_a_common_schema_walks_no_meta_schema(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    checked: list[object] = []
    monkeypatch.setattr(
        jsonschema.Draft202012Validator,
        "check_schema",
        classmethod(lambda cls, schema, format_checker=None: checked.append(schema)),
    )
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    spec = ToolSpec(name="plain_common", description="", parameters=schema)
    Tool(spec=spec, execute=_echo)
    assert checked == []
    # a schema outside the subset still gets the meta-schema's verdict at registration
    other = ToolSpec(
        name="plain_pattern", description="", parameters={"properties": {"s": {"pattern": "^a"}}}
    )
    Tool(spec=other, execute=_echo)
    assert checked == [other.parameters]


def test_the_validator_is_compiled_at_first_use_from_the_schema_as_registered() -> None:
    schema: dict[str, Any] = {"type": "object", "properties": {"n": {"type": "integer"}}}
    spec = ToolSpec(name="plain_lazy", description="", parameters=schema)
    Tool(spec=spec, execute=_echo)
    compiled = argument_schema(spec)
    assert compiled._validator is None  # nothing compiled at registration
    schema["properties"]["n"]["type"] = "string"  # a later edit changes nothing
    assert compiled.errors({"n": "x"}) == ["$.n: expected integer, got string"]
    assert compiled.errors({"n": 1}) == []
    assert compiled.validator is compiled.validator  # compiled once


def test_a_bad_schema_is_still_refused_at_registration_with_the_meta_schemas_message() -> None:
    bad = ToolSpec(name="plain_bad", description="", parameters={"required": ["a", "a"]})
    with pytest.raises(ValidationError, match=r"tool 'plain_bad': .* at #/required: .*non-unique"):
        Tool(spec=bad, execute=_echo)
    with pytest.raises(ValidationError, match="invalid parameters schema at #/minLength"):
        ArgumentSchema("t", {"minLength": -1})


def test_a_schema_without_refs_does_not_load_the_reference_resolver(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import referencing

    def refuse(*args: object, **kwargs: object) -> object:
        raise AssertionError("the resolver was built")

    monkeypatch.setattr(referencing.Registry, "with_resource", refuse)
    arguments._check_refs("t", {"type": "object", "properties": {"a": {"enum": ["$ref"]}}})
    with pytest.raises(AssertionError, match="resolver was built"):
        arguments._check_refs("t", {"$ref": "#/$defs/a", "$defs": {"a": {}}})
