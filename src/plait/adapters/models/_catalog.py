"""Built-in capabilities of current models: context window, max output, capabilities and
USD prices per million tokens (input / output / cached input), read from ``catalog.json``
beside this module. :data:`CATALOG_DATE` says when its figures were published; the file
is rewritten from a public source by ``scripts/refresh_catalog.py`` (see
:mod:`plait.adapters.models._catalog_source`). Any other model of a known kind still
works (tools and streaming assumed, window and prices unknown) and can be described in
plait.toml, which overrides any of it (see :mod:`plait.config`)."""

from __future__ import annotations

import json
from dataclasses import replace
from importlib import resources
from typing import Any

from plait.adapters.models._common import same_family
from plait.application.ports import ModelCapabilities

__all__ = [
    "CATALOG_DATE",
    "CATALOG_SOURCE",
    "KIND_DEFAULTS",
    "builtin_capabilities",
    "builtin_models",
    "load_catalog",
]


def load_catalog(
    text: str,
) -> tuple[str, str, dict[str, dict[str, ModelCapabilities]]]:
    """``catalog.json``'s date, source and tables (``openai``, ``anthropic``, ``gemini``,
    ``deepseek``: model name -> capabilities)."""
    document: dict[str, Any] = json.loads(text)
    tables = {
        table: {model: ModelCapabilities(**fields) for model, fields in rows.items()}
        for table, rows in document["models"].items()
    }
    return document["as_of"], document["source"], tables


CATALOG_DATE, CATALOG_SOURCE, _CATALOG = load_catalog(
    resources.files(__package__).joinpath("catalog.json").read_text(encoding="utf-8")
)

_DEEPSEEK = _CATALOG["deepseek"]
_TABLES: dict[str, dict[str, ModelCapabilities]] = {
    "openai": _CATALOG["openai"],
    "openai-responses": _CATALOG["openai"],
    "anthropic": _CATALOG["anthropic"],
    "gemini": _CATALOG["gemini"],
    "deepseek": _DEEPSEEK,
}

KIND_DEFAULTS = ModelCapabilities(
    tool_calls=True, structured_output=False, streaming=True, parallel_tool_calls=True
)
"""For a model the table does not know (a new model, a local server): tools and streaming
assumed, window and prices unknown (so a cost ceiling or compaction that needs them fails
clearly); declare them in plait.toml."""


def builtin_capabilities(table: str, model: str) -> ModelCapabilities | None:
    """The entry for ``model`` (or a dated variant of it) in ``table``, if any."""
    entries = _TABLES.get(table, {})
    if model in entries:
        return entries[model]
    for name, caps in entries.items():
        if same_family(name, model):
            return caps
    return None


def builtin_models() -> list[tuple[str, ModelCapabilities]]:
    """Every built-in model as (spec, capabilities)."""
    out: list[tuple[str, ModelCapabilities]] = []
    for kind in ("openai", "openai-responses", "anthropic", "gemini"):
        out.extend((f"{kind}:{m}", c) for m, c in _TABLES[kind].items())
    out.extend((f"openai-compatible:https://api.deepseek.com#{m}", c) for m, c in _DEEPSEEK.items())
    return out


def with_overrides(caps: ModelCapabilities, **fields: object) -> ModelCapabilities:
    return replace(caps, **{k: v for k, v in fields.items() if v is not None})  # type: ignore[arg-type]
