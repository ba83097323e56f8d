"""MCP ⇄ plait, on plain values: tool names, effect classes from annotations (with the
user's overrides) and tool results as the text the model reads."""

from __future__ import annotations

import base64
import binascii
import fnmatch
import hashlib
import json
import re
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

import jsonschema
import mcp.types as mcp_types

from plait.adapters.mcp._config import McpServerConfig
from plait.domain.errors import ToolError
from plait.domain.record import record
from plait.domain.tools import EffectClass, ToolSpec

__all__ = [
    "IDEMPOTENCY_META_KEY",
    "McpToolInfo",
    "describe_result",
    "tool_info",
    "tool_name",
]

IDEMPOTENCY_META_KEY = "dev.plait/idempotency_key"
"""The request ``_meta`` key carrying the call's idempotency key (stable across repeats)."""

_MAX_NAME = 64  # the tightest provider limit (OpenAI, Anthropic, Gemini): ^[a-zA-Z0-9_-]{1,64}$
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")

_T = TypeVar("_T")

SaveBlob = Callable[[bytes, str], Awaitable[str]]
"""Stores binary content (bytes, media type) and returns its artifact id."""


def tool_name(server: str, tool: str) -> str:
    """``mcp__SERVER__TOOL``, using only characters every provider accepts; a name over
    64 characters (or one that had to be rewritten) keeps a prefix and gains a short
    hash of the original, so it stays stable and unique."""
    name = f"mcp__{server}__{tool}"
    safe = _UNSAFE.sub("_", name)
    if safe == name and len(name) <= _MAX_NAME:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:8]
    return f"{safe[: _MAX_NAME - 9]}_{digest}"


@record(kw_only=True)
class McpToolInfo:
    """One server tool as plait offers it."""

    server: str
    remote_name: str
    spec: ToolSpec
    destructive: bool
    effect_source: str
    """``annotations`` or ``config`` (the user's ``effects`` override)."""


def _override(table: Mapping[str, _T], name: str) -> _T | None:
    """The value of the most specific glob matching ``name`` (exact name first)."""
    if name in table:
        return table[name]
    hits = [g for g in table if fnmatch.fnmatchcase(name, g)]
    return table[max(hits, key=len)] if hits else None


def _effect(annotations: mcp_types.ToolAnnotations | None) -> EffectClass:
    if annotations is not None and annotations.read_only_hint:
        return EffectClass.READ_ONLY
    if annotations is not None and annotations.idempotent_hint:
        return EffectClass.IDEMPOTENT
    return EffectClass.SIDE_EFFECT


def _check_schema(server: str, tool: str, schema: Mapping[str, Any]) -> None:
    """Refuse a listed tool whose input schema is not valid JSON Schema (by its
    ``$schema``, default Draft 2020-12), naming the server; calls are then validated like
    every tool's (:mod:`plait.application.arguments`)."""
    kind = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    try:
        kind.check_schema(dict(schema))
    except jsonschema.SchemaError as exc:
        raise ToolError(
            f"MCP server {server!r}: tool {tool!r} has an invalid input schema: {exc.message}",
            server=server,
            tool=tool,
        ) from exc


def tool_info(config: McpServerConfig, tool: mcp_types.Tool) -> McpToolInfo:
    """The ToolSpec of one listed tool: the server's description and schema, the
    effect class from its annotations unless ``config.effects`` says otherwise."""
    annotations = tool.annotations
    configured = _override(config.effects, tool.name)
    effect = configured or _effect(annotations)
    destructive = _override(config.destructive, tool.name)
    if destructive is None:
        hinted = annotations.destructive_hint if annotations is not None else None
        # The MCP default for destructiveHint is true when the tool is not read-only.
        destructive = effect is not EffectClass.READ_ONLY and hinted is not False
    schema = dict(tool.input_schema)
    schema.setdefault("type", "object")
    _check_schema(config.name, tool.name, schema)
    spec = ToolSpec(
        name=tool_name(config.name, tool.name),
        description=tool.description or tool.title or f"{tool.name} (MCP server {config.name})",
        parameters=schema,
        effect=effect,
    )
    return McpToolInfo(
        server=config.name,
        remote_name=tool.name,
        spec=spec,
        destructive=destructive,
        effect_source="config" if configured is not None else "annotations",
    )


async def describe_result(result: mcp_types.CallToolResult, save: SaveBlob) -> str:
    """Every content block as text: text as is, images, audio and blobs stored as
    artifacts (named in the text), embedded text resources inline with their URI,
    resource links named, and ``structuredContent`` as JSON unless a text block
    already holds the same value."""
    parts: list[str] = []
    texts: list[str] = []
    for block in result.content:
        if isinstance(block, mcp_types.TextContent):
            parts.append(block.text)
            texts.append(block.text)
        elif isinstance(block, mcp_types.ImageContent | mcp_types.AudioContent):
            data = _decode(block.data)
            ref = await save(data, block.mime_type)
            parts.append(f"[{block.type}: {block.mime_type}, {len(data)} bytes, artifact {ref}]")
        elif isinstance(block, mcp_types.EmbeddedResource):
            parts.append(await _resource(block.resource, save))
        elif isinstance(block, mcp_types.ResourceLink):
            what = f" ({block.mime_type})" if block.mime_type else ""
            about = f": {block.description}" if block.description else ""
            parts.append(f"[resource link {block.uri} {block.name}{what}{about}]")
        else:  # a content type newer than this client
            parts.append(f"[{getattr(block, 'type', 'unknown')} content not shown]")
    structured = result.structured_content
    if structured is not None and not any(_same_json(t, structured) for t in texts):
        parts.append("[structuredContent]\n" + json.dumps(structured, ensure_ascii=False))
    return "\n".join(parts)


async def _resource(
    contents: mcp_types.TextResourceContents | mcp_types.BlobResourceContents, save: SaveBlob
) -> str:
    media = contents.mime_type or "application/octet-stream"
    if isinstance(contents, mcp_types.TextResourceContents):
        return f"[resource {contents.uri} ({contents.mime_type or 'text/plain'})]\n{contents.text}"
    data = _decode(contents.blob)
    ref = await save(data, media)
    return f"[resource {contents.uri} ({media}), {len(data)} bytes, artifact {ref}]"


def _decode(data: str) -> bytes:
    try:
        return base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ToolError("the MCP server returned binary content that is not base64") from exc


def _same_json(text: str, value: object) -> bool:
    """Whether the text block already says what ``structuredContent`` says: its JSON, or
    (the SDKs' wrapping of a plain return value as ``{"result": ...}``) the wrapped value."""
    if isinstance(value, dict) and list(value) == ["result"]:
        inner = value["result"]
        if text == inner or _same_json(text, inner):
            return True
    try:
        return bool(json.loads(text) == value)
    except ValueError:
        return False
