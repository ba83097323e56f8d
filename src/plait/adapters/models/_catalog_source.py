"""Turning a public model table into plait's built-in catalog (``catalog.json``).

The source is LiteLLM's ``model_prices_and_context_window.json`` (one object per model:
``litellm_provider``, ``max_input_tokens``, ``max_output_tokens``, per-token USD prices,
``supports_*`` flags, an optional ``deprecation_date``). ``scripts/refresh_catalog.py``
downloads it and calls :func:`catalog_from_litellm`; nothing here touches the network.

Rules, so that the catalog never claims more than the source says:

- the context window is the source's ``max_input_tokens`` (for some OpenAI models that is
  the input limit, smaller than the total window: conservative, never over);
- prices per million tokens are the per-token prices x 10^6 (cached input: the cache-read
  price; absent means unknown);
- ``tool_calls`` and ``structured_output`` are the source's ``supports_function_calling``
  and ``supports_response_schema``; ``parallel_tool_calls`` is
  ``supports_parallel_function_calling`` where the source states it and otherwise follows
  tool calling; ``streaming`` is assumed (every listed chat model streams);
- an entry past its ``deprecation_date`` on the catalog's date is left out;
- a wanted model missing from the source is reported, never invented.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["CATALOG_PROVIDERS", "CORRECTIONS", "WANTED", "catalog_from_litellm", "render_catalog"]

CATALOG_PROVIDERS: dict[str, tuple[str, ...]] = {
    "openai": ("openai",),
    "anthropic": ("anthropic",),
    "gemini": ("gemini", "vertex_ai-language-models"),
    "deepseek": ("deepseek",),
}
"""Each catalog table and the source's ``litellm_provider`` values that feed it, best
first (Gemini's own API before Vertex AI, whose figures match for these models)."""

WANTED: dict[str, tuple[str, ...]] = {
    "openai": (
        "gpt-5.6",
        "gpt-5.5",
        "gpt-5.4",
        "gpt-5.4-mini",
        "gpt-5.4-nano",
        "gpt-5.2",
        "gpt-5.1",
        "gpt-5",
        "gpt-5-mini",
        "gpt-5-nano",
        "gpt-4.1",
        "gpt-4.1-mini",
        "gpt-4.1-nano",
        "gpt-4o",
        "gpt-4o-mini",
        "o3",
        "o4-mini",
    ),
    "anthropic": (
        "claude-opus-5",
        "claude-opus-4-7",
        "claude-opus-4-6",
        "claude-sonnet-4-6",
        "claude-opus-4-5",
        "claude-sonnet-4-5",
        "claude-haiku-4-5",
        "claude-opus-4-1",
        "claude-sonnet-4",
    ),
    "gemini": (
        "gemini-3.6-flash",
        "gemini-3.5-flash",
        "gemini-3.5-flash-lite",
        "gemini-3.1-pro-preview",
        "gemini-3.1-flash-lite-preview",
        "gemini-3-flash-preview",
        "gemini-3-pro-preview",
        "gemini-2.5-pro",
        "gemini-2.5-flash",
        "gemini-2.5-flash-lite",
    ),
    "deepseek": ("deepseek-v4-pro", "deepseek-v4-flash", "deepseek-chat", "deepseek-reasoner"),
}
"""The chat models each provider currently offers for agent work (no audio, realtime,
search or image variants)."""

CORRECTIONS: dict[tuple[str, str], dict[str, Any]] = {
    ("deepseek", "deepseek-reasoner"): {"tool_calls": True, "parallel_tool_calls": True},
}
"""Where the source is known to lag the provider's own documentation: DeepSeek's
thinking mode (``deepseek-reasoner``) takes tools since DeepSeek-V3.2, while the table
still marks it without function calling."""


def _per_mtok(value: object) -> float | None:
    if not isinstance(value, int | float) or isinstance(value, bool):
        return None
    return round(float(value) * 1_000_000, 6)


def _find(
    source: Mapping[str, Any], providers: Sequence[str], model: str
) -> Mapping[str, Any] | None:
    """The source entry for ``model`` (plain or with a ``provider/`` prefix, or its
    earliest dated variant ``model-YYYYMMDD``/``model-YYYY-MM-DD``), best provider first."""
    for provider in providers:
        candidates = [model, f"{provider}/{model}"]
        dated = sorted(
            key
            for key in source
            if key.startswith((f"{model}-", f"{provider}/{model}-"))
            and key.rsplit(f"{model}-", 1)[1].replace("-", "").isdigit()
        )
        for key in candidates + dated:
            entry = source.get(key)
            if isinstance(entry, Mapping) and entry.get("litellm_provider") == provider:
                return entry
    return None


def _entry(raw: Mapping[str, Any]) -> dict[str, Any] | None:
    window = raw.get("max_input_tokens")
    if not isinstance(window, int) or window < 1:
        return None
    out = raw.get("max_output_tokens")
    tools = raw.get("supports_function_calling") is True
    parallel = raw.get("supports_parallel_function_calling")
    return {
        "context_window": window,
        "max_output_tokens": out if isinstance(out, int) and out > 0 else None,
        "tool_calls": tools,
        "parallel_tool_calls": tools if parallel is None else parallel is True,
        "structured_output": raw.get("supports_response_schema") is True,
        "streaming": True,
        "reasoning": raw.get("supports_reasoning") is True,
        "price_input_per_mtok": _per_mtok(raw.get("input_cost_per_token")),
        "price_output_per_mtok": _per_mtok(raw.get("output_cost_per_token")),
        "price_cached_input_per_mtok": _per_mtok(raw.get("cache_read_input_token_cost")),
    }


def _retired(raw: Mapping[str, Any], as_of: dt.date) -> bool:
    date = raw.get("deprecation_date")
    if not isinstance(date, str):
        return False
    try:
        return dt.date.fromisoformat(date) <= as_of
    except ValueError:
        return False


def catalog_from_litellm(
    source: Mapping[str, Any],
    *,
    as_of: dt.date,
    origin: str,
    wanted: Mapping[str, Sequence[str]] | None = None,
) -> tuple[dict[str, Any], list[str]]:
    """The catalog document for ``wanted`` models read from ``source``, and a note for
    each wanted model left out (missing, retired or without a window). ``wanted``
    defaults to :data:`WANTED`."""
    if wanted is None:
        wanted = WANTED
    tables: dict[str, dict[str, Any]] = {}
    notes: list[str] = []
    for table, models in wanted.items():
        providers = CATALOG_PROVIDERS.get(table)
        if providers is None:
            raise ValueError(f"unknown catalog table {table!r}")
        rows: dict[str, Any] = {}
        for model in models:
            raw = _find(source, providers, model)
            if raw is None:
                notes.append(f"{table}:{model}: not in the source")
            elif _retired(raw, as_of):
                notes.append(f"{table}:{model}: retired on {raw['deprecation_date']}")
            elif (entry := _entry(raw)) is None:
                notes.append(f"{table}:{model}: the source gives no context window")
            else:
                rows[model] = entry | CORRECTIONS.get((table, model), {})
        tables[table] = rows
    document = {"as_of": as_of.isoformat(), "source": origin, "models": tables}
    return document, notes


def render_catalog(document: Mapping[str, Any]) -> str:
    """``catalog.json``'s text: one line per model, so a refresh reads as a short diff."""
    lines = [
        "{",
        f' "as_of": {json.dumps(document["as_of"])},',
        f' "source": {json.dumps(document["source"])},',
        ' "models": {',
    ]
    tables = list(document["models"].items())
    for table_index, (table, rows) in enumerate(tables):
        lines.append(f"  {json.dumps(table)}: {{")
        items = list(rows.items())
        for row, (model, entry) in enumerate(items):
            comma = "," if row < len(items) - 1 else ""
            lines.append(f"   {json.dumps(model)}: {json.dumps(entry)}{comma}")
        lines.append("  }" + ("," if table_index < len(tables) - 1 else ""))
    lines += [" }", "}"]
    return "\n".join(lines) + "\n"
