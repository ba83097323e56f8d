"""Tool schemas per provider. A schema is sent as it is (plait validates every call
against the full schema anyway), marked strict only where the provider's strict mode can
express all of it; a keyword a provider cannot take is refused at run start, naming the
tool and the keyword, never dropped."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from plait.domain.answers import OutputSchema
from plait.domain.errors import ConfigError
from plait.domain.tools import ToolSpec

__all__ = [
    "answer_gemini_schema",
    "answer_openai_strict",
    "gemini_schema",
    "openai_strict",
    "plain_schema",
]

_CHILD_MAPS = ("properties", "$defs", "definitions", "patternProperties", "dependentSchemas")
_CHILD_LISTS = ("anyOf", "oneOf", "allOf", "prefixItems")
_CHILD_ONE = ("items", "not", "additionalProperties", "if", "then", "else", "contains")

# OpenAI structured outputs (strict): the documented subset.
_OPENAI_STRICT = frozenset({"type", "properties", "required", "additionalProperties", "items",
    "enum", "const", "anyOf", "$ref", "$defs", "definitions", "description", "title", "pattern",
    "format", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf",
    "minItems", "maxItems", "default", "examples", "$comment"})  # fmt: skip
# Gemini ``parametersJsonSchema``: the keywords Gemini documents. ``oneOf`` and ``allOf``
# are left out on purpose: Gemini accepts and ignores them, which would loosen the schema.
_GEMINI = frozenset({"type", "format", "title", "description", "enum", "items", "prefixItems",
    "minItems", "maxItems", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
    "anyOf", "properties", "additionalProperties", "required", "$ref", "$defs", "$id",
    "$anchor", "nullable", "minLength", "maxLength", "pattern", "minProperties",
    "maxProperties", "default", "examples", "propertyOrdering"})  # fmt: skip
_ANNOTATIONS_DROPPED = frozenset({"$schema", "$comment", "deprecated", "readOnly", "writeOnly"})


def _walk(schema: object, path: str) -> Iterator[tuple[str, Mapping[str, Any]]]:
    if not isinstance(schema, Mapping):
        return
    yield path, schema
    for key in _CHILD_MAPS:
        children = schema.get(key)
        if isinstance(children, Mapping):
            for name, child in children.items():
                yield from _walk(child, f"{path}/{key}/{name}")
    for key in _CHILD_LISTS:
        children = schema.get(key)
        if isinstance(children, list):
            for i, child in enumerate(children):
                yield from _walk(child, f"{path}/{key}/{i}")
    for key in _CHILD_ONE:
        yield from _walk(schema.get(key), f"{path}/{key}")


def plain_schema(spec: ToolSpec) -> dict[str, Any]:
    """The schema as a fresh plain dict, ``type: object`` made explicit at the root."""
    schema: dict[str, Any] = _copy(spec.parameters)
    schema.setdefault("type", "object")
    schema.setdefault("properties", {})
    return schema


def _copy(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_copy(v) for v in value]
    return value


def openai_strict(spec: ToolSpec) -> tuple[dict[str, Any], bool]:
    """(schema, strict): strict when every object lists all its properties as required,
    forbids additional properties and uses only the strict-mode keywords; otherwise the
    same schema in non-strict mode (plait still validates each call against it)."""
    return _strict(plain_schema(spec))


def answer_openai_strict(answer: OutputSchema) -> tuple[dict[str, Any], bool]:
    """(schema, strict) for a typed final answer, by the same rule as a tool's."""
    return _strict(answer.schema())


def _strict(schema: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    for _, node in _walk(schema, "#"):
        if not _OPENAI_STRICT.issuperset(node):
            return schema, False
        if node.get("type") == "object" or "properties" in node:
            props = node.get("properties") or {}
            if node.get("additionalProperties") is not False:
                return schema, False
            if set(node.get("required") or ()) != set(props):
                return schema, False
    return schema, True


def gemini_schema(spec: ToolSpec) -> dict[str, Any]:
    """The schema for Gemini's ``parametersJsonSchema``; a keyword outside Gemini's subset
    is a :class:`ConfigError` naming the tool, the keyword and where it is."""
    return _gemini(plain_schema(spec), f"tool {spec.name!r}", "the tool's", tool=spec.name)


def answer_gemini_schema(answer: OutputSchema) -> dict[str, Any]:
    """The schema for Gemini's ``responseJsonSchema``; refused like a tool's schema."""
    return _gemini(answer.schema(), "the output schema", "the output", output_schema=answer.name)


def _gemini(schema: dict[str, Any], what: str, whose: str, **details: str) -> dict[str, Any]:
    for path, node in _walk(schema, "#"):
        for key in node:
            if key not in _GEMINI and key not in _ANNOTATIONS_DROPPED:
                raise ConfigError(
                    f"{what}: Gemini cannot express the JSON Schema keyword "
                    f"{key!r} (at {path}); rewrite {whose} schema without it or choose "
                    "another provider",
                    keyword=key,
                    provider="gemini",
                    **details,
                )
    for _, node in _walk(schema, "#"):
        for key in _ANNOTATIONS_DROPPED.intersection(node):
            del node[key]  # type: ignore[attr-defined]
    return schema
