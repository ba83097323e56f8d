"""Built-in capabilities of current models: context window, max output, reasoning and
USD prices per million tokens (input / output / cached input) as published when this
table was written. It lists the models whose figures were known then; any other model of
a known kind still works (tools and streaming assumed, window and prices unknown) and
can be described in plait.toml. ``plait.toml`` overrides any of it (see :mod:`plait.config`)."""

from __future__ import annotations

from dataclasses import replace

from plait.adapters.models._common import same_family
from plait.application.ports import ModelCapabilities

__all__ = ["KIND_DEFAULTS", "builtin_capabilities", "builtin_models"]


def _m(
    window: int, out: int, price: tuple[float, float, float], *, reasoning: bool = False
) -> ModelCapabilities:
    return ModelCapabilities(
        tool_calls=True,
        structured_output=True,
        streaming=True,
        parallel_tool_calls=True,
        context_window=window,
        max_output_tokens=out,
        reasoning=reasoning,
        price_input_per_mtok=price[0],
        price_output_per_mtok=price[1],
        price_cached_input_per_mtok=price[2],
    )


_OPENAI: dict[str, ModelCapabilities] = {
    "gpt-5": _m(400_000, 128_000, (1.25, 10.0, 0.125), reasoning=True),
    "gpt-5-mini": _m(400_000, 128_000, (0.25, 2.0, 0.025), reasoning=True),
    "gpt-5-nano": _m(400_000, 128_000, (0.05, 0.40, 0.005), reasoning=True),
    "gpt-4.1": _m(1_047_576, 32_768, (2.0, 8.0, 0.50)),
    "gpt-4.1-mini": _m(1_047_576, 32_768, (0.40, 1.60, 0.10)),
    "gpt-4.1-nano": _m(1_047_576, 32_768, (0.10, 0.40, 0.025)),
    "gpt-4o": _m(128_000, 16_384, (2.50, 10.0, 1.25)),
    "gpt-4o-mini": _m(128_000, 16_384, (0.15, 0.60, 0.075)),
    "o3": _m(200_000, 100_000, (2.0, 8.0, 0.50), reasoning=True),
    "o4-mini": _m(200_000, 100_000, (1.10, 4.40, 0.275), reasoning=True),
}
_ANTHROPIC: dict[str, ModelCapabilities] = {
    "claude-opus-4-5": _m(200_000, 64_000, (5.0, 25.0, 0.50), reasoning=True),
    "claude-haiku-4-5": _m(200_000, 64_000, (1.0, 5.0, 0.10), reasoning=True),
}
_GEMINI: dict[str, ModelCapabilities] = {
    "gemini-3-pro-preview": _m(1_048_576, 65_536, (2.0, 12.0, 0.20), reasoning=True),
    "gemini-2.5-pro": _m(1_048_576, 65_536, (1.25, 10.0, 0.31), reasoning=True),
    "gemini-2.5-flash": _m(1_048_576, 65_536, (0.30, 2.50, 0.075), reasoning=True),
}
_DEEPSEEK: dict[str, ModelCapabilities] = {
    "deepseek-chat": _m(128_000, 8_192, (0.28, 0.42, 0.028)),
    "deepseek-reasoner": _m(128_000, 64_000, (0.28, 0.42, 0.028), reasoning=True),
}

_TABLES: dict[str, dict[str, ModelCapabilities]] = {
    "openai": _OPENAI,
    "openai-responses": _OPENAI,
    "anthropic": _ANTHROPIC,
    "gemini": _GEMINI,
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
