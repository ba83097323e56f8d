"""Typed tools: one declaration gives a tool its JSON schema and its parsed arguments.

A tool's arguments are declared once, as the annotated parameters of a function
(:func:`tool`) or as a :class:`ToolArguments` model (the built-in tools). The schema the
model is shown comes from that declaration (pydantic generates it; :func:`arguments_schema`
makes it plain: no titles, ``$defs`` inlined, an optional argument is its type, not
``anyOf [type, null]``). Every call is checked against exactly that schema before it is
stored (:mod:`plait.application.arguments`); at execution the decoded arguments are parsed
into the declared types, once.

A rule the schema cannot say (for example "at most the sandbox's maximum timeout") is a
validator on the model; a call it refuses fails with a message the model reads.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import re
import types
import typing
from collections.abc import Callable, Mapping
from copy import deepcopy
from typing import Any, Literal, TypeVar, cast

import pydantic
import pydantic_core
from pydantic import BaseModel, ConfigDict
from pydantic.fields import FieldInfo

from plait.application.ports import Tool, ToolInvocation, ToolOutput
from plait.domain.errors import ToolError
from plait.domain.tools import EffectClass, ToolSpec

__all__ = [
    "EffectName",
    "ToolArguments",
    "arguments_schema",
    "function_tool",
    "parse_arguments",
    "tool",
]

EffectName = Literal["read_only", "idempotent", "side_effect"]
ArgumentsT = TypeVar("ArgumentsT", bound=BaseModel)


class ToolArguments(BaseModel):
    """Base of a tool's arguments model: unknown arguments are refused (the schema says
    ``additionalProperties: false``) and a parsed value is immutable."""

    model_config = ConfigDict(extra="forbid", frozen=True)


# --- schema ---------------------------------------------------------------------------------


def arguments_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The JSON schema of ``model`` as a model is shown it: an object with ``properties``,
    ``required`` (possibly empty) and ``additionalProperties: false``, without pydantic's
    titles; ``$defs`` are inlined, except a type that contains itself."""
    raw = model.model_json_schema(mode="validation")
    defs: dict[str, Any] = raw.pop("$defs", {})
    recursive = {name for name in defs if name in _reachable(defs[name], defs, set())}
    body = _plain(raw, defs, recursive)
    schema: dict[str, Any] = {
        "type": "object",
        "properties": body.get("properties", {}),
        "required": body.get("required", []),
        "additionalProperties": body.get("additionalProperties", False),
    }
    if recursive:
        schema["$defs"] = {name: _plain(defs[name], defs, recursive) for name in sorted(recursive)}
    return schema


_SCHEMA_MAPS = ("properties", "patternProperties", "$defs", "dependentSchemas")
_VALUES = ("enum", "const", "default", "examples")
_DEFS = "#/$defs/"


def _reachable(node: Any, defs: Mapping[str, Any], seen: set[str]) -> set[str]:
    """The definitions ``node`` refers to, directly or through others."""
    if isinstance(node, list):
        for item in node:
            _reachable(item, defs, seen)
    elif isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith(_DEFS) and ref[len(_DEFS) :] not in seen:
            seen.add(ref[len(_DEFS) :])
            _reachable(defs.get(ref[len(_DEFS) :]), defs, seen)
        for key, value in node.items():
            if key not in _VALUES:
                _reachable(value, defs, seen)
    return seen


def _plain(node: Any, defs: Mapping[str, Any], recursive: set[str]) -> Any:
    if isinstance(node, list):
        return [_plain(item, defs, recursive) for item in node]
    if not isinstance(node, dict):
        return node
    ref = node.get("$ref")
    if isinstance(ref, str) and ref.startswith(_DEFS) and ref[len(_DEFS) :] not in recursive:
        siblings = {k: v for k, v in node.items() if k != "$ref"}
        node = {**defs[ref[len(_DEFS) :]], **siblings}
        return _plain(node, defs, recursive)
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key == "title":
            continue
        if key in _SCHEMA_MAPS and isinstance(value, dict):
            out[key] = {k: _plain(v, defs, recursive) for k, v in value.items()}
        elif key in _VALUES:
            out[key] = deepcopy(value)
        else:
            out[key] = _plain(value, defs, recursive)
    optional = _optional_branch(out)
    if optional is not None:  # `x: int | None = None` is an optional integer
        out.pop("anyOf")
        out.pop("default")
        out = {**optional, **out}
    first = [k for k in ("type", "description") if k in out]
    return {**{k: out[k] for k in first}, **{k: v for k, v in out.items() if k not in first}}


def _optional_branch(node: dict[str, Any]) -> dict[str, Any] | None:
    branches = node.get("anyOf")
    if not (isinstance(branches, list) and len(branches) == 2 and node.get("default", 0) is None):
        return None
    others = [b for b in branches if b != {"type": "null"}]
    return others[0] if len(others) == 1 and isinstance(others[0], dict) else None


# --- parsing --------------------------------------------------------------------------------


def parse_arguments(model: type[ArgumentsT], arguments: Mapping[str, Any]) -> ArgumentsT:
    """``arguments`` (already checked against the model's schema) parsed into ``model``.
    A rule of the model the schema does not carry raises :class:`ToolError` naming the
    argument."""
    try:
        return model.model_validate(arguments)
    except pydantic.ValidationError as exc:
        problems = "; ".join(_problem(error) for error in exc.errors(include_url=False))
        raise ToolError(f"invalid arguments: {problems}") from None


def _problem(error: Any) -> str:
    where = "$" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in error["loc"])
    return f"{where}: {str(error['msg']).removeprefix('Value error, ')}"


# --- the decorator --------------------------------------------------------------------------

_MISSING: Any = object()


def tool(
    function: None = None,
    /,
    *,
    effect: EffectClass | EffectName = _MISSING,
    name: str | None = None,
    description: str | None = None,
    stoppable: bool | None = None,
    effect_of: Callable[..., EffectClass | EffectName] | None = None,
) -> Callable[[Callable[..., Any]], Tool]:
    """Turn an annotated function into a :class:`~plait.application.ports.Tool`::

        @plait.tool(effect="read_only")
        def word_count(path: str, min_length: int = 1) -> int:
            \"\"\"Count the words of a file.

            Args:
                path: File to read.
                min_length: Shortest word counted.
            \"\"\"

    ``effect`` (required) says how safe a call is to repeat after a crash. The schema
    comes from the type hints (``Annotated[int, Field(...)]`` constraints included), the
    description from the docstring's first paragraph and each argument's from its
    ``Args:`` entry. A parameter annotated :class:`ToolInvocation` receives the call's
    invocation (workspace, idempotency key, time limit) and is not an argument. A sync
    function runs in a thread. Returning a ``str`` gives that text, a
    :class:`ToolOutput` is used as is, anything else is sent as JSON; raising
    :class:`~plait.domain.errors.ToolError` fails the call with its message.

    ``stoppable`` defaults to True for async functions and False for sync ones (a thread
    cannot be stopped: a cancelled run waits for it). ``effect_of`` takes the function's
    arguments and returns the effect of that one call, where it can prove more than
    ``effect`` (e.g. a compare-and-write is idempotent).
    """
    if function is not None:
        raise TypeError(
            f"@plait.tool needs an effect class: write @plait.tool(effect=...) above "
            f"{getattr(function, '__name__', 'the function')}, with effect 'read_only', "
            "'idempotent' or 'side_effect'"
        )
    if effect is _MISSING:
        raise TypeError(
            "plait.tool() needs effect='read_only', 'idempotent' or 'side_effect': how safe "
            "a call is to repeat after a crash"
        )
    effect_class = _effect(effect)

    def decorate(target: Callable[..., Any]) -> Tool:
        return function_tool(
            target,
            effect=effect_class,
            name=name,
            description=description,
            stoppable=stoppable,
            effect_of=effect_of,
        )

    return decorate


def _effect(value: object) -> EffectClass:
    try:
        return EffectClass(str(value))
    except ValueError:
        raise TypeError(
            f"effect must be 'read_only', 'idempotent' or 'side_effect', not {value!r}"
        ) from None


def function_tool(
    function: Callable[..., Any],
    *,
    effect: EffectClass,
    name: str | None = None,
    description: str | None = None,
    stoppable: bool | None = None,
    effect_of: Callable[..., EffectClass | EffectName] | None = None,
) -> Tool:
    """The tool of ``function`` (see :func:`tool`)."""
    tool_name = name or function.__name__
    summary, documented = _docstring(inspect.getdoc(function) or "")
    model, context = _arguments_model(function, tool_name, documented)
    spec = ToolSpec(
        name=tool_name,
        description=description if description is not None else summary,
        parameters=arguments_schema(model),
        effect=effect,
    )
    fields = tuple(model.model_fields)
    is_async = inspect.iscoroutinefunction(function)

    def keywords(arguments: Mapping[str, Any]) -> dict[str, Any]:
        parsed = parse_arguments(model, arguments)
        return {field: getattr(parsed, field) for field in fields}

    async def execute(invocation: ToolInvocation) -> ToolOutput:
        kwargs = keywords(invocation.call.arguments())
        if context is not None:
            kwargs[context] = invocation
        if is_async:
            result = await function(**kwargs)
        else:
            result = await asyncio.to_thread(function, **kwargs)
        return _output(result)

    call_effect = None
    if effect_of is not None:
        decide = effect_of

        def call_effect(arguments: dict[str, Any]) -> EffectClass:
            try:
                kwargs = keywords(arguments)
            except ToolError:  # execution will refuse it; nothing happens
                return effect
            return EffectClass(decide(**kwargs))

    return Tool(
        spec=spec,
        execute=execute,
        stoppable=is_async if stoppable is None else stoppable,
        effect_of=call_effect,
    )


def _output(result: object) -> ToolOutput:
    if isinstance(result, ToolOutput):
        return result
    if isinstance(result, str):
        return ToolOutput(content=result)
    if result is None:
        return ToolOutput(content="")
    text = pydantic_core.to_json(result).decode()
    return ToolOutput(content=text, media_type="application/json")


def _arguments_model(
    function: Callable[..., Any], tool_name: str, documented: Mapping[str, str]
) -> tuple[type[BaseModel], str | None]:
    hints = typing.get_type_hints(function, include_extras=True)
    fields: dict[str, Any] = {}
    context: str | None = None
    for parameter in inspect.signature(function).parameters.values():
        where = f"tool {tool_name!r}: parameter {parameter.name!r}"
        if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            raise TypeError(f"{where}: *args and **kwargs cannot be tool arguments")
        if parameter.kind is parameter.POSITIONAL_ONLY:
            raise TypeError(f"{where}: a tool's arguments are passed by name")
        if parameter.name not in hints:
            raise TypeError(f"{where} needs a type annotation (it becomes the JSON schema)")
        annotation = hints[parameter.name]
        if _is_invocation(annotation):
            context = parameter.name
            continue
        default = ... if parameter.default is parameter.empty else parameter.default
        text = documented.get(parameter.name)
        if text is not None and not _described(annotation):
            fields[parameter.name] = (annotation, pydantic.Field(default, description=text))
        else:
            fields[parameter.name] = (annotation, default)
    model = pydantic.create_model(f"{tool_name}_arguments", __base__=ToolArguments, **fields)
    return cast(type[BaseModel], model), context


def _is_invocation(annotation: object) -> bool:
    """``ToolInvocation``, also ``Annotated`` or ``| None``."""
    if annotation is ToolInvocation:
        return True
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _is_invocation(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        return any(_is_invocation(arg) for arg in typing.get_args(annotation))
    return False


def _described(annotation: object) -> bool:
    if typing.get_origin(annotation) is not typing.Annotated:
        return False
    return any(
        isinstance(meta, FieldInfo) and meta.description for meta in typing.get_args(annotation)
    )


_SECTION = re.compile(r"^(Args|Arguments|Parameters|Returns|Raises|Yields|Examples?|Notes?):\s*$")
_ENTRY = re.compile(r"^(\*{0,2}\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")


def _docstring(doc: str) -> tuple[str, dict[str, str]]:
    """The first paragraph, and the ``Args:`` entries (Google style) by parameter name."""
    lines = doc.splitlines()
    summary: list[str] = []
    for line in lines:
        if not line.strip() or _SECTION.match(line.strip()):
            break
        summary.append(line.strip())
    described: dict[str, str] = {}
    section = None
    current: str | None = None
    indent = 0
    for line in lines:
        stripped = line.strip()
        heading = _SECTION.match(stripped)
        if heading and len(line) - len(line.lstrip()) == 0:
            section, current = heading.group(1), None
            continue
        if section not in ("Args", "Arguments", "Parameters") or not stripped:
            continue
        depth = len(line) - len(line.lstrip())
        entry = _ENTRY.match(stripped)
        if entry and (current is None or depth <= indent):
            current, indent = entry.group(1).lstrip("*"), depth
            described[current] = entry.group(2).strip()
        elif current is not None:
            described[current] = f"{described[current]} {stripped}".strip()
    return " ".join(summary), described


# --- precomputed schemas --------------------------------------------------------------------


def schema_cache_text(models: Mapping[str, type[BaseModel]]) -> str:
    """The JSON text of a precomputed schema file (see
    :func:`plait.application.arguments.cached_schemas`): each tool's :func:`arguments_schema`
    by tool name. ``scripts/tool_schemas.py`` writes it; a test checks it is current."""

    schemas = {name: arguments_schema(model) for name, model in models.items()}
    return json.dumps(schemas, indent=2, ensure_ascii=False) + "\n"
