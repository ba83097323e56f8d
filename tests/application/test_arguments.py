from __future__ import annotations

import re
from typing import Any

import pytest

from plait.application.arguments import MAX_ERRORS, ArgumentSchema, argument_schema
from plait.application.ports import Tool, ToolInvocation, ToolOutput
from plait.domain.errors import ValidationError
from plait.domain.tools import ToolSpec

TOOL_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"text": {"type": "string"}},
    "required": ["text"],
    "additionalProperties": False,
}


def compile_schema(schema: dict[str, Any] | bool) -> Any:
    return ArgumentSchema("t", schema).errors  # type: ignore[arg-type]


def errors(schema: dict[str, Any] | bool, instance: object) -> list[str]:
    found: list[str] = compile_schema(schema)(instance)
    return found


def schema_error(schema: dict[str, Any]) -> str:
    with pytest.raises(ValidationError) as info:
        compile_schema(schema)
    return str(info.value.message)


# -- type ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("type_name", "valid", "invalid", "got"),
    [
        ("object", {"a": 1}, [1], "array"),
        ("array", [1, "a"], {"a": 1}, "object"),
        ("string", "", 0, "integer"),
        ("integer", 3, 3.5, "number"),
        ("integer", -(10**30), "3", "string"),
        ("number", 3.5, None, "null"),
        ("number", 3, "3", "string"),
        ("boolean", False, 0, "integer"),
        ("null", None, False, "boolean"),
    ],
)
def test_type_accepts_and_rejects(type_name: str, valid: object, invalid: object, got: str) -> None:
    assert errors({"type": type_name}, valid) == []
    assert errors({"type": type_name}, invalid) == [f"$: expected {type_name}, got {got}"]


@pytest.mark.parametrize("type_name", ["integer", "number"])
def test_bool_is_not_a_number(type_name: str) -> None:
    assert errors({"type": type_name}, True) == [f"$: expected {type_name}, got boolean"]
    assert errors({"type": type_name}, False) == [f"$: expected {type_name}, got boolean"]


def test_integer_accepts_float_with_zero_fraction() -> None:
    assert errors({"type": "integer"}, 1.0) == []
    assert errors({"type": "integer"}, -0.0) == []
    assert errors({"type": "integer"}, 1.5) == ["$: expected integer, got number"]
    assert errors({"type": "integer"}, float("inf")) == ["$: expected integer, got number"]


def test_type_list() -> None:
    schema = {"type": ["string", "null"]}
    assert errors(schema, "x") == []
    assert errors(schema, None) == []
    assert errors(schema, 1) == ["$: expected string or null, got integer"]
    assert errors({"type": ["integer", "boolean"]}, True) == []
    assert errors({"type": ["integer", "boolean"]}, 2.0) == []
    assert errors({"type": ["integer", "boolean"]}, 2.5) == [
        "$: expected integer or boolean, got number"
    ]


def test_unknown_python_type_is_named() -> None:
    assert errors({"type": "object"}, {1, 2}) == ["$: expected object, got set"]
    assert errors({"type": "array"}, (1, 2)) == ["$: expected array, got tuple"]


# -- objects -------------------------------------------------------------------------------


def test_tool_schema_example() -> None:
    validate = compile_schema(TOOL_SCHEMA)
    assert validate({"text": "step-1"}) == []
    assert validate({}) == ["$: missing required property 'text'"]
    assert validate({"text": 1}) == ["$.text: expected string, got integer"]
    assert validate({"txt": "x"}) == [
        "$: missing required property 'text'",
        "$: unexpected property 'txt'",
    ]
    assert validate("text") == ["$: expected object, got string"]


def test_properties_only_checked_when_present() -> None:
    schema = {"properties": {"a": {"type": "string"}, "b": {"type": "integer"}}}
    assert errors(schema, {}) == []
    assert errors(schema, {"a": "x", "other": None}) == []
    assert errors(schema, {"a": 1, "b": "2"}) == [
        "$.a: expected string, got integer",
        "$.b: expected integer, got string",
    ]
    # Object keywords ignore non-objects.
    assert errors(schema, [1]) == []


def test_required() -> None:
    schema = {"required": ["path", "mode"]}
    assert errors(schema, {"path": 1, "mode": 2}) == []
    assert errors(schema, {"mode": 2}) == ["$: missing required property 'path'"]
    assert errors(schema, {}) == [
        "$: missing required property 'path'",
        "$: missing required property 'mode'",
    ]
    assert errors(schema, "not an object") == []


def test_additional_properties_schema() -> None:
    schema = {"properties": {"a": {}}, "additionalProperties": {"type": "integer"}}
    assert errors(schema, {"a": "anything", "b": 1, "c": 2}) == []
    assert errors(schema, {"b": "x", "my key": None}) == [
        "$.b: expected integer, got string",
        "$['my key']: expected integer, got null",
    ]


def test_additional_properties_true_and_false() -> None:
    assert errors({"additionalProperties": True}, {"x": 1}) == []
    assert errors({"additionalProperties": False}, {}) == []
    assert errors({"additionalProperties": False}, {"x": 1}) == ["$: unexpected property 'x'"]


def test_min_and_max_properties() -> None:
    schema = {"minProperties": 1, "maxProperties": 2}
    assert errors(schema, {"a": 1}) == []
    assert errors(schema, {"a": 1, "b": 2}) == []
    assert errors(schema, {}) == ["$: expected at least 1 property, got 0"]
    assert errors(schema, {"a": 1, "b": 2, "c": 3}) == ["$: expected at most 2 properties, got 3"]
    assert errors(schema, []) == []


# -- arrays --------------------------------------------------------------------------------


def test_items() -> None:
    schema = {"type": "array", "items": {"type": "string"}}
    assert errors(schema, []) == []
    assert errors(schema, ["a", "b"]) == []
    assert errors(schema, ["a", 2, None]) == [
        "$[1]: expected string, got integer",
        "$[2]: expected string, got null",
    ]
    assert errors({"items": {"type": "string"}}, "abc") == []


def test_prefix_items_with_and_without_items() -> None:
    schema: dict[str, Any] = {"prefixItems": [{"type": "string"}, {"type": "integer"}]}
    assert errors(schema, ["a"]) == []
    assert errors(schema, ["a", 1, None, {}]) == []
    assert errors(schema, [1, "a"]) == [
        "$[0]: expected string, got integer",
        "$[1]: expected integer, got string",
    ]
    schema["items"] = {"type": "boolean"}
    assert errors(schema, ["a", 1, True, False]) == []
    assert errors(schema, ["a", 1, True, 0]) == ["$[3]: expected boolean, got integer"]
    schema["items"] = False
    assert errors(schema, ["a", 1]) == []
    assert errors(schema, ["a", 1, True]) == ["$: expected at most 2 items, got 3"]


def test_items_false_without_prefix() -> None:
    assert errors({"items": False}, []) == []
    assert errors({"items": False}, [1]) == ["$: expected at most 0 items, got 1"]


def test_min_and_max_items() -> None:
    schema = {"minItems": 1, "maxItems": 2}
    assert errors(schema, [1]) == []
    assert errors(schema, [1, 2]) == []
    assert errors(schema, []) == ["$: expected at least 1 item, got 0"]
    assert errors(schema, [1, 2, 3]) == ["$: expected at most 2 items, got 3"]
    assert errors(schema, "") == []


def test_unique_items() -> None:
    schema = {"uniqueItems": True}
    assert errors(schema, [1, "1", True, None, [1], {"a": 1}]) == []
    assert errors(schema, [1, 2, 1.0]) == ["$: items must be unique"]
    assert errors(schema, [{"a": [1]}, {"a": [1]}]) == ["$: items must be unique"]
    assert errors(schema, [True, 1]) == []
    assert errors({"uniqueItems": False}, [1, 1]) == []


# -- strings -------------------------------------------------------------------------------


def test_min_and_max_length_count_code_points() -> None:
    schema = {"minLength": 2, "maxLength": 3}
    assert errors(schema, "ab") == []
    assert errors(schema, "😀😀😀") == []  # 3 code points, 12 UTF-8 bytes
    assert errors(schema, "a") == ["$: expected at least 2 characters, got 1"]
    assert errors(schema, "abcd") == ["$: expected at most 3 characters, got 4"]
    assert errors({"maxLength": 1}, "ab") == ["$: expected at most 1 character, got 2"]
    assert errors(schema, 12345) == []


def test_pattern_uses_search_semantics() -> None:
    schema = {"pattern": "^[a-z]+$"}
    assert errors(schema, "abc") == []
    assert errors(schema, "abc1") == ["$: 'abc1' does not match pattern '^[a-z]+$'"]
    assert errors({"pattern": "b"}, "abc") == []  # unanchored: search, not match
    assert errors({"pattern": "^b"}, "abc") == ["$: 'abc' does not match pattern '^b'"]
    assert errors(schema, 1) == []


def test_long_values_are_truncated_in_messages() -> None:
    [message] = errors({"pattern": "^x"}, "a" * 500)
    assert message.startswith("$: 'aaaa")
    assert "...' does not match pattern" not in message
    assert "... does not match pattern '^x'" in message
    assert len(message) < 150


# -- numbers -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("schema", "valid", "invalid", "message"),
    [
        ({"minimum": 5}, 5, 4.5, "$: 4.5 is less than minimum 5"),
        ({"maximum": 5}, 5.0, 6, "$: 6 is greater than maximum 5"),
        ({"exclusiveMinimum": 5}, 5.01, 5, "$: 5 is not greater than exclusiveMinimum 5"),
        ({"exclusiveMaximum": 5}, 4, 5.0, "$: 5.0 is not less than exclusiveMaximum 5"),
        ({"multipleOf": 3}, 9, 10, "$: 10 is not a multiple of 3"),
        ({"multipleOf": 0.1}, 0.3, 0.35, "$: 0.35 is not a multiple of 0.1"),
        ({"multipleOf": 2}, 4.0, 4.5, "$: 4.5 is not a multiple of 2"),
        ({"multipleOf": 0.5}, 10**400, float("inf"), "$: inf is not a multiple of 0.5"),
    ],
)
def test_numeric_keywords(
    schema: dict[str, Any], valid: object, invalid: object, message: str
) -> None:
    assert errors(schema, valid) == []
    assert errors(schema, invalid) == [message]
    # Numeric keywords ignore non-numbers, including booleans.
    assert errors(schema, "7") == []
    assert errors(schema, True) == []


# -- enum and const ------------------------------------------------------------------------


def test_enum() -> None:
    schema = {"enum": ["r", "w"]}
    assert errors(schema, "r") == []
    assert errors(schema, "x") == ["$: 'x' is not one of ['r', 'w']"]
    assert errors(schema, ["r"]) == ["$: ['r'] is not one of ['r', 'w']"]


def test_enum_uses_json_equality() -> None:
    schema = {"enum": [1, None, [1, {"a": False}]]}
    assert errors(schema, 1) == []
    assert errors(schema, 1.0) == []
    assert errors(schema, None) == []
    assert errors(schema, [1.0, {"a": False}]) == []
    assert errors(schema, True) == ["$: True is not one of [1, None, [1, {'a': False}]]"]
    assert errors(schema, [True, {"a": False}]) != []
    assert errors(schema, [1, {"a": 0}]) != []
    assert errors({"enum": [True]}, 1) == ["$: 1 is not one of [True]"]
    assert errors({"enum": [0]}, False) == ["$: False is not one of [0]"]


def test_const() -> None:
    assert errors({"const": "x"}, "x") == []
    assert errors({"const": "x"}, "y") == ["$: 'y' is not equal to const 'x'"]
    assert errors({"const": {"a": [1, 2]}}, {"a": [1, 2.0]}) == []
    assert errors({"const": {"a": [1, 2]}}, {"a": [2, 1]}) == [
        "$: {'a': [2, 1]} is not equal to const {'a': [1, 2]}"
    ]
    assert errors({"const": None}, None) == []
    assert errors({"const": False}, 0) == ["$: 0 is not equal to const False"]
    assert errors({"const": 1}, True) == ["$: True is not equal to const 1"]


# -- combinators ---------------------------------------------------------------------------


def test_all_of_reports_every_failure() -> None:
    schema = {"allOf": [{"type": "string"}, {"minLength": 3}, {"pattern": "^a"}]}
    assert errors(schema, "abc") == []
    assert errors(schema, "b") == [
        "$: expected at least 3 characters, got 1",
        "$: 'b' does not match pattern '^a'",
    ]


def test_any_of() -> None:
    schema = {"anyOf": [{"type": "string"}, {"type": "null"}]}
    assert errors(schema, "x") == []
    assert errors(schema, None) == []
    assert errors(schema, 3) == [
        "$: value does not match any schema in anyOf "
        "(option 0: expected string, got integer; option 1: expected null, got integer)"
    ]


def test_any_of_keeps_nested_paths_in_reasons() -> None:
    schema = {"anyOf": [{"properties": {"a": {"type": "string"}}}, {"required": ["b"]}]}
    assert errors({"properties": {"x": schema}}, {"x": {"a": 1}}) == [
        "$.x: value does not match any schema in anyOf "
        "(option 0: $.x.a: expected string, got integer; "
        "option 1: missing required property 'b')"
    ]


def test_one_of() -> None:
    schema = {"oneOf": [{"type": "integer"}, {"minimum": 2}]}
    assert errors(schema, 1) == []
    assert errors(schema, 2.5) == []
    assert errors(schema, 3) == [
        "$: value matches more than one option in oneOf, expected exactly one"
    ]
    assert errors(schema, "x") == []  # minimum ignores strings, so exactly option 1 matches
    assert errors({"oneOf": [{"type": "integer"}, {"type": "null"}]}, "x") == [
        "$: value does not match any schema in oneOf "
        "(option 0: expected integer, got string; option 1: expected null, got string)"
    ]


def test_not() -> None:
    schema = {"not": {"type": "null"}}
    assert errors(schema, 0) == []
    assert errors(schema, None) == ["$: value must not match the 'not' schema"]
    assert errors({"not": {}}, 1) == ["$: value must not match the 'not' schema"]
    assert errors({"not": False}, 1) == []


# -- boolean schemas -----------------------------------------------------------------------


def test_boolean_root_schemas() -> None:
    assert errors(True, {"anything": [1]}) == []
    assert errors(False, None) == ["$: no value is allowed here (schema is false)"]
    assert errors({}, object()) == []


def test_boolean_subschemas() -> None:
    schema = {"properties": {"ok": True, "never": False}}
    assert errors(schema, {"ok": 1}) == []
    # jsonschema drops the path of a false subschema's error (its descend() returns early)
    assert errors(schema, {"never": 1}) == ["$: no value is allowed here (schema is false)"]


# -- $ref ----------------------------------------------------------------------------------


def test_ref_to_defs_and_definitions() -> None:
    schema = {
        "properties": {"a": {"$ref": "#/$defs/name"}, "b": {"$ref": "#/definitions/count"}},
        "$defs": {"name": {"type": "string"}},
        "definitions": {"count": {"type": "integer", "minimum": 0}},
    }
    assert errors(schema, {"a": "x", "b": 0}) == []
    assert errors(schema, {"a": 1, "b": -1}) == [
        "$.a: expected string, got integer",
        "$.b: -1 is less than minimum 0",
    ]


def test_ref_with_sibling_keywords_applies_both() -> None:
    schema = {"$defs": {"s": {"type": "string"}}, "$ref": "#/$defs/s", "maxLength": 2}
    assert errors(schema, "ab") == []
    assert errors(schema, "abc") == ["$: expected at most 2 characters, got 3"]
    assert errors(schema, 1) == ["$: expected string, got integer"]


def test_ref_escaped_pointer_tokens() -> None:
    schema = {"$defs": {"a/b": {"type": "null"}, "c~d": {"type": "null"}}}
    assert errors({**schema, "$ref": "#/$defs/a~1b"}, 1) == ["$: expected null, got integer"]
    assert errors({**schema, "$ref": "#/$defs/c~0d"}, None) == []


def test_recursive_ref() -> None:
    schema = {
        "$ref": "#/$defs/node",
        "$defs": {
            "node": {
                "type": "object",
                "properties": {
                    "name": {"type": "string"},
                    "children": {"type": "array", "items": {"$ref": "#/$defs/node"}},
                },
                "required": ["name"],
                "additionalProperties": False,
            }
        },
    }
    validate = compile_schema(schema)
    tree = {"name": "a", "children": [{"name": "b", "children": [{"name": "c"}]}]}
    assert validate(tree) == []
    bad = {"name": "a", "children": [{"name": "b", "children": [{"name": 3, "x": 1}, {}]}]}
    assert validate(bad) == [
        "$.children[0].children[0]: unexpected property 'x'",
        "$.children[0].children[0].name: expected string, got integer",
        "$.children[0].children[1]: missing required property 'name'",
    ]


def test_recursive_ref_to_root() -> None:
    schema = {"type": "array", "items": {"anyOf": [{"type": "integer"}, {"$ref": "#"}]}}
    assert errors(schema, [1, [2, [3, []]]]) == []
    assert errors(schema, [1, [2, ["x"]]]) != []


@pytest.mark.slow
def test_deeply_nested_value_is_reported_not_raised() -> None:
    schema = {"type": "array", "items": {"$ref": "#"}}
    value: list[Any] = []
    for _ in range(100_000):
        value = [value]
    assert errors(schema, value) == ["$: value is nested too deeply to validate"]


# -- paths and error cap -------------------------------------------------------------------


def test_nested_paths_in_messages() -> None:
    schema = {
        "type": "object",
        "properties": {
            "path": {
                "type": "array",
                "items": {"type": "object", "properties": {"name": {"type": "string"}}},
            },
            "with space": {"type": "integer"},
        },
    }
    assert errors(schema, {"path": [{"name": "ok"}, {"name": 5}], "with space": "x"}) == [
        "$.path[1].name: expected string, got integer",
        "$['with space']: expected integer, got string",
    ]


def test_error_cap() -> None:
    schema = {"type": "array", "items": {"type": "string"}}
    result = errors(schema, list(range(100)))
    assert MAX_ERRORS == 20
    assert len(result) == 20
    assert result[0] == "$[0]: expected string, got integer"
    assert result[-1] == "$[19]: expected string, got integer"


def test_error_cap_inside_combinator_branch_does_not_stop_outer_validation() -> None:
    branch = {"type": "array", "items": {"type": "string"}}
    schema = {"properties": {"a": {"anyOf": [branch, {"type": "null"}]}, "b": {"type": "null"}}}
    result = errors(schema, {"a": list(range(50)), "b": 1})
    assert len(result) == 2
    assert result[0].startswith("$.a: value does not match any schema in anyOf (option 0: $.a[0]")
    assert result[1] == "$.b: expected null, got integer"


def test_validator_is_reusable_and_returns_fresh_lists() -> None:
    validate = compile_schema(TOOL_SCHEMA)
    first = validate({})
    first.append("mutated")
    assert validate({}) == ["$: missing required property 'text'"]


# -- annotations and schema errors ---------------------------------------------------------


def test_annotation_keywords_are_ignored() -> None:
    schema = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "urn:tool",
        "$comment": "c",
        "title": "t",
        "description": "d",
        "default": {},
        "examples": [{}],
        "deprecated": False,
        "readOnly": False,
        "writeOnly": False,
        "nullable": True,
        "properties": {"when": {"type": "string", "format": "date-time"}},
    }
    assert errors(schema, {"when": "not a date"}) == []
    assert errors(schema, None) == []  # nullable is ignored, and no type is given


def test_keywords_the_old_validator_refused_are_enforced() -> None:
    schema = {
        "type": "object",
        "patternProperties": {"^x_": {"type": "integer"}},
        "additionalProperties": False,
        "properties": {
            "tags": {"type": "array", "contains": {"const": "main"}},
            "mode": {"enum": ["copy", "move"]},
            "target": {"type": "string"},
        },
        "if": {"properties": {"mode": {"const": "move"}}, "required": ["mode"]},
        "then": {"required": ["target"]},
        "propertyNames": {"maxLength": 8},
        "dependentRequired": {"target": ["mode"]},
    }
    assert errors(schema, {"x_a": 1, "tags": ["main"], "mode": "move", "target": "b"}) == []
    assert errors(schema, {"x_a": "1"}) == ["$.x_a: expected integer, got string"]
    assert errors(schema, {"y": 1}) == ["$: unexpected property 'y'"]
    assert errors(schema, {"tags": ["dev"]}) == ["$.tags: no item matches the 'contains' schema"]
    assert errors(schema, {"mode": "move"}) == ["$: missing required property 'target'"]
    assert errors(schema, {"mode": "copy"}) == []
    assert errors(schema, {"target": "b"}) == ["$: 'mode' is a dependency of 'target'"]
    assert errors({"propertyNames": {"maxLength": 2}}, {"abc": 1}) == [
        "$: expected at most 2 characters, got 3"
    ]
    assert errors({"unevaluatedProperties": False, "properties": {"a": {}}}, {"b": 1}) != []


@pytest.mark.parametrize(
    ("schema", "pointer", "problem"),
    [
        ({"type": "strng"}, "#/type", "'strng' is not valid"),
        ({"required": "x"}, "#/required", "'x' is not of type 'array'"),
        ({"required": ["a", "a"]}, "#/required", "non-unique"),
        ({"properties": {"a": 3}}, "#/properties/a", "3 is not of type 'object', 'boolean'"),
        ({"properties": {"p": {"pattern": "(unclosed"}}}, "#/properties/p/pattern", "regex"),
        ({"minLength": -1}, "#/minLength", "-1 is less than the minimum of 0"),
        ({"anyOf": []}, "#/anyOf", "should be non-empty"),
        ({"items": [{}]}, "#/items", "is not of type 'object', 'boolean'"),
    ],
)
def test_invalid_schemas_name_the_tool_and_the_pointer(
    schema: dict[str, Any], pointer: str, problem: str
) -> None:
    message = schema_error(schema)
    assert message.startswith(f"tool 't': invalid parameters schema at {pointer}: "), message
    assert problem in message


@pytest.mark.parametrize(
    "ref", ["#/$defs/missing", "#/properties/nope", "other.json#/a", "https://example.com/s"]
)
def test_refs_that_do_not_resolve_within_the_schema_are_refused(ref: str) -> None:
    assert schema_error({"properties": {"a": {"$ref": ref}}}) == (
        f"tool 't': invalid parameters schema: $ref {ref!r} does not resolve within the schema"
    )


def test_a_tool_with_a_bad_schema_is_refused_when_registered() -> None:
    async def execute(invocation: ToolInvocation) -> ToolOutput:
        return ToolOutput(content="")

    bad = ToolSpec(name="broken", description="", parameters={"type": "object", "required": 3})
    with pytest.raises(ValidationError, match="tool 'broken': invalid parameters schema") as info:
        Tool(spec=bad, execute=execute)
    assert info.value.details == {"tool": "broken"}
    good = ToolSpec(name="fine", description="", parameters=TOOL_SCHEMA)
    Tool(spec=good, execute=execute)
    assert argument_schema(good) is argument_schema(good)  # compiled once per spec


def test_integral_float_keyword_values_are_accepted() -> None:
    assert errors({"maxLength": 2.0}, "abc") == ["$: expected at most 2 characters, got 3"]


def test_defs_only_apply_when_referenced() -> None:
    assert errors({"$defs": {"unused": {"type": "string"}}}, 1) == []


# -- performance ---------------------------------------------------------------------------


def test_validation_does_not_touch_the_schema_dict() -> None:
    schema: dict[str, Any] = {
        "type": "object",
        "properties": {"text": {"type": "string", "pattern": "^s"}},
        "required": ["text"],
    }
    validate = compile_schema(schema)
    schema.clear()
    assert validate({"text": "step-1"}) == []
    assert validate({"text": "x"}) == ["$.text: 'x' does not match pattern '^s'"]
    assert re.fullmatch(r"\$\.text: .*", validate({"text": 1})[0])


# -- the shortcut for simple schemas -----------------------------------------------------------

SIMPLE: dict[str, Any] = {
    "type": "object",
    "description": "annotations do not count",
    "properties": {
        "s": {"type": "string", "description": "a text"},
        "i": {"type": "integer"},
        "n": {"type": "number"},
        "b": {"type": "boolean"},
        "z": {"type": "null"},
        "a": {"type": "array"},
        "o": {"type": "object"},
    },
    "required": ["s", "i"],
    "additionalProperties": False,
}

SIMPLE_CASES: list[object] = [
    {"s": "x", "i": 1},
    {"s": "x", "i": 1, "n": 2.5, "b": True, "z": None, "a": [1, "2"], "o": {"k": [1]}},
    {"s": "x", "i": 1.0},  # an integer to JSON Schema: jsonschema decides
    {"s": "x", "i": True},  # a boolean is no integer
    {"s": "x", "i": 1, "n": False},
    {"s": "x", "i": 1, "n": 3},
    {"s": "x"},
    {"i": 1},
    {"s": 1, "i": 1},
    {"s": "x", "i": 1, "extra": 1},
    {"s": "x", "i": 1, "z": 0},
    {"s": "x", "i": 1, "a": {}},
    {"s": "x", "i": 1, "o": []},
    [],
    "text",
    None,
]


def test_the_shortcut_leaves_extra_properties_to_the_schema() -> None:
    open_schema = {**SIMPLE, "additionalProperties": True}
    assert ArgumentSchema("t", open_schema).quick is not None
    assert errors(open_schema, {"s": "x", "i": 1, "more": [1]}) == []
    assert errors({**SIMPLE}, {"s": "x", "i": 1, "more": 1}) == ["$: unexpected property 'more'"]


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "object", "properties": {"s": {"type": "string", "format": "uri"}}},
        {"type": "object", "properties": {"s": {"type": "string", "minimum": 1}}},
        {"type": "object", "properties": {"n": {"type": "integer", "minLength": 1}}},
        {"type": "object", "properties": {"n": {"type": "number", "multipleOf": 2}}},
        {"type": "object", "properties": {"b": {"type": "boolean", "minimum": 0}}},
        {"type": "object", "properties": {"s": {"type": ["string", "null"]}}},
        {"type": "object", "properties": {"s": {"enum": ["a"]}}},
        {"type": "object", "properties": {"s": True}},
        {"type": "object", "additionalProperties": {"type": "string"}},
        {"type": "object", "patternProperties": {"^x": {"type": "string"}}},
        {"type": "object", "$defs": {}, "properties": {}},
        {"type": ["object"]},
        {"properties": {}},
    ],
)
def test_other_schemas_take_no_shortcut(schema: dict[str, Any]) -> None:
    assert ArgumentSchema("t", schema).quick is None


BOUNDED: dict[str, Any] = {
    "type": "object",
    "properties": {
        "path": {"type": "string", "minLength": 1, "maxLength": 3, "default": "x"},
        "name": {"type": "string", "pattern": "^[a-z]+$"},
        "part": {"type": "string", "pattern": "b"},
        "line": {"type": "integer", "minimum": 1, "maximum": 10},
        "ratio": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1.5},
    },
    "required": ["path"],
    "additionalProperties": False,
}

BOUNDED_CASES: list[object] = [
    {"path": "a"},
    {"path": "abc", "name": "x", "part": "abc", "line": 1, "ratio": 1.25},
    {"path": ""},  # too short
    {"path": "abcd"},  # too long
    {"path": "𝔘𝔫𝔦"},  # three code points: as long as jsonschema counts it
    {"path": "𝔘𝔫𝔦𝔠"},
    {"path": "a", "name": "X"},
    {"path": "a", "name": "ab\n"},  # '$' matches before a final newline, as re.search does
    {"path": "a", "part": "abc"},  # pattern is unanchored
    {"path": "a", "part": "ac"},
    {"path": "a", "line": 0},
    {"path": "a", "line": 10},
    {"path": "a", "line": 11},
    {"path": "a", "line": 5.0},  # an integer to JSON Schema: jsonschema decides
    {"path": "a", "line": True},
    {"path": "a", "ratio": 0},
    {"path": "a", "ratio": 1.5},
    {"path": "a", "ratio": 1},
    {"path": "a", "ratio": float("nan")},
    {"path": "a", "ratio": float("inf")},
    {"path": "a", "line": 10**30},
    {"path": 1},
    {"line": 1},
]


@pytest.mark.parametrize(
    ("schema", "instance"),
    [(SIMPLE, case) for case in SIMPLE_CASES] + [(BOUNDED, case) for case in BOUNDED_CASES],
)
def test_the_shortcut_agrees_with_jsonschema(schema: dict[str, Any], instance: object) -> None:
    """Plain types, and the usual bounds of a property (lengths, pattern, numeric limits)."""
    compiled = ArgumentSchema("t", schema)
    assert compiled.quick is not None
    from jsonschema import Draft202012Validator

    reference = Draft202012Validator(schema).is_valid(instance)
    assert (compiled.errors(instance) == []) is reference
    if compiled.quick(instance):  # it only ever vouches for valid arguments
        assert reference


def test_the_built_in_tools_schemas_take_the_shortcut() -> None:
    from plait.adapters.tools._catalog import SPECS

    assert SPECS
    for spec in SPECS:
        assert ArgumentSchema(spec.name, spec.parameters).quick is not None, spec.name


def test_the_shortcut_takes_the_schema_as_registered() -> None:
    schema: dict[str, Any] = {"type": "object", "properties": {"s": {"type": "string"}}}
    compiled = ArgumentSchema("t", schema)
    schema["properties"]["s"]["type"] = "integer"  # a later edit changes nothing
    assert compiled.errors({"s": "x"}) == []
    assert compiled.errors({"s": 1}) == ["$.s: expected string, got integer"]
