"""Tool schemas per provider. A schema is sent as it is (plait validates every call
against the full schema anyway), marked strict only where the provider's strict mode can
express all of it; a keyword a provider cannot take is refused at run start, naming the
tool and the keyword, never dropped. Rewrites are made only where they keep the meaning
(for Gemini: draft-07 ``definitions`` as ``$defs``, ``const`` as a one-value ``enum``, a
``oneOf`` whose branches cannot overlap as ``anyOf``), and a root that is not a plain
object schema (a top-level ``anyOf``/``oneOf``/``allOf``/``not``/``enum``, which MCP
servers sometimes send and every provider rejects) is refused for every provider."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, cast

from plait.domain.answers import OutputSchema
from plait.domain.errors import ConfigError
from plait.domain.tools import ToolSpec

__all__ = [
    "answer_gemini_schema",
    "answer_openai_strict",
    "anthropic_schema",
    "gemini_schema",
    "openai_strict",
    "plain_schema",
]

_CHILD_MAPS = ("properties", "$defs", "definitions", "patternProperties", "dependentSchemas")
_CHILD_LISTS = ("anyOf", "oneOf", "allOf", "prefixItems")
_CHILD_ONE = ("items", "not", "additionalProperties", "if", "then", "else", "contains")

# OpenAI structured outputs (strict): the documented subset.
_OPENAI_STRICT = frozenset(
    {
        "type",
        "properties",
        "required",
        "additionalProperties",
        "items",
        "enum",
        "const",
        "anyOf",
        "$ref",
        "$defs",
        "definitions",
        "description",
        "title",
        "pattern",
        "format",
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "multipleOf",
        "minItems",
        "maxItems",
        "default",
        "examples",
        "$comment",
    }
)
# Gemini ``parametersJsonSchema``: the keywords Gemini documents. ``oneOf`` and ``allOf``
# are left out on purpose: Gemini accepts and ignores them, which would loosen the schema.
_GEMINI = frozenset(
    {
        "type",
        "format",
        "title",
        "description",
        "enum",
        "items",
        "prefixItems",
        "minItems",
        "maxItems",
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "anyOf",
        "properties",
        "additionalProperties",
        "required",
        "$ref",
        "$defs",
        "$id",
        "$anchor",
        "nullable",
        "minLength",
        "maxLength",
        "pattern",
        "minProperties",
        "maxProperties",
        "default",
        "examples",
        "propertyOrdering",
    }
)
_ANNOTATIONS_DROPPED = frozenset({"$schema", "$comment", "deprecated", "readOnly", "writeOnly"})
_ROOT_REFUSED = ("anyOf", "oneOf", "allOf", "not", "enum", "const", "$ref")
# OpenAI strict mode's documented limits and string formats.
_OPENAI_FORMATS = frozenset(
    ("date-time", "time", "date", "duration", "email", "hostname", "ipv4", "ipv6", "uuid")
)
_OPENAI_MAX_ENUM_VALUES = 1000
_OPENAI_LONG_ENUM = 250
_OPENAI_MAX_ENUM_CHARS = 15_000


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
            for index, child in enumerate(children):
                yield from _walk(child, f"{path}/{key}/{index}")
    for key in _CHILD_ONE:
        yield from _walk(schema.get(key), f"{path}/{key}")


def plain_schema(spec: ToolSpec) -> dict[str, Any]:
    """The schema as a fresh plain dict, ``type: object`` made explicit at the root."""
    schema: dict[str, Any] = _copy(spec.parameters)
    schema.setdefault("type", "object")
    schema.setdefault("properties", {})
    return schema


def _checked_root(spec: ToolSpec, provider: str) -> dict[str, Any]:
    schema = plain_schema(spec)
    for key in _ROOT_REFUSED:
        if key in schema:
            raise ConfigError(
                f"tool {spec.name!r}: {provider} takes only a plain object schema for a tool's "
                f"arguments, not one with {key!r} at the top level; rewrite the schema as one "
                "object (plait validates each call against the full schema anyway)",
                tool=spec.name,
                keyword=key,
                provider=provider,
            )
    return schema


def anthropic_schema(spec: ToolSpec) -> dict[str, Any]:
    """The schema for Anthropic's ``input_schema``: any JSON Schema under an object root."""
    return _checked_root(spec, "anthropic")


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
    return _strict(_checked_root(spec, "openai"))


def answer_openai_strict(answer: OutputSchema) -> tuple[dict[str, Any], bool]:
    """(schema, strict) for a typed final answer, by the same rule as a tool's."""
    return _strict(answer.schema())


def _strict(schema: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    enum_values = 0
    for _, node in _walk(schema, "#"):
        if not _OPENAI_STRICT.issuperset(node):
            return schema, False
        if "format" in node and node["format"] not in _OPENAI_FORMATS:
            return schema, False
        enum = node.get("enum")
        if isinstance(enum, list):
            enum_values += len(enum)
            chars = sum(len(v) for v in enum if isinstance(v, str))
            if len(enum) > _OPENAI_LONG_ENUM and chars > _OPENAI_MAX_ENUM_CHARS:
                return schema, False
        if node.get("type") == "object" or "properties" in node:
            props = node.get("properties") or {}
            if node.get("additionalProperties") is not False:
                return schema, False
            if set(node.get("required") or ()) != set(props):
                return schema, False
    return schema, enum_values <= _OPENAI_MAX_ENUM_VALUES


def gemini_schema(spec: ToolSpec) -> dict[str, Any]:
    """The schema for Gemini's ``parametersJsonSchema``; a keyword outside Gemini's subset
    is a :class:`ConfigError` naming the tool, the keyword and where it is."""
    schema = _checked_root(spec, "gemini")
    return _gemini(schema, f"tool {spec.name!r}", "the tool's", tool=spec.name)


def answer_gemini_schema(answer: OutputSchema) -> dict[str, Any]:
    """The schema for Gemini's ``responseJsonSchema``; refused like a tool's schema."""
    return _gemini(answer.schema(), "the output schema", "the output", output_schema=answer.name)


def _gemini(schema: dict[str, Any], what: str, whose: str, **details: str) -> dict[str, Any]:
    schema = _defs_for_definitions(schema)
    for _, node in _walk(schema, "#"):
        if "oneOf" in node and _exclusive(node["oneOf"]):
            mutable = cast(dict[str, Any], node)  # _copy made every node a dict
            mutable["anyOf"] = mutable.pop("oneOf")
    for _, node in _walk(schema, "#"):
        if "const" in node and "enum" not in node:
            mutable = cast(dict[str, Any], node)
            mutable["enum"] = [mutable.pop("const")]  # the same constraint, in Gemini's words
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


def _defs_for_definitions(schema: dict[str, Any]) -> dict[str, Any]:
    """Draft-07 ``definitions`` (zod-to-json-schema's output) as ``$defs``, with every
    ``$ref`` into them rewritten: the same schema in the keyword Gemini knows."""
    if "definitions" not in schema or "$defs" in schema:
        return schema
    schema["$defs"] = schema.pop("definitions")
    for _, node in _walk(schema, "#"):
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/definitions/"):
            mutable = cast(dict[str, Any], node)  # _copy made every node a dict
            mutable["$ref"] = "#/$defs/" + ref.removeprefix("#/definitions/")
    return schema


def _exclusive(branches: object) -> bool:
    """Whether no value can match two of the ``oneOf`` branches, as far as can be seen
    without solving schemas: each branch has its own single ``type``, or each fixes a
    different ``const`` value of one common property (a tagged union)."""
    if not isinstance(branches, list) or not all(isinstance(b, Mapping) for b in branches):
        return False
    # integer values are numbers too: the two types overlap
    types = [{"integer": "number"}.get(b.get("type"), b.get("type")) for b in branches]
    if all(isinstance(t, str) for t in types) and len(set(types)) == len(types):
        return True
    tags: list[set[tuple[str, str]]] = []
    for branch in branches:
        props = branch.get("properties") or {}
        required = set(branch.get("required") or ())
        tags.append(
            {
                (name, repr(sub["const"]))
                for name, sub in props.items()
                if isinstance(sub, Mapping) and "const" in sub and name in required
            }
        )
    names = set.intersection(*({n for n, _ in t} for t in tags)) if tags else set()
    for name in names:
        values = [next(v for n, v in t if n == name) for t in tags]
        if len(set(values)) == len(values):
            return True
    return False
