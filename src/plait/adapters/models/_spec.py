"""Model specs (``openai:gpt-4o``, ``openai-compatible:http://localhost:8000/v1#qwen``,
a name declared in plait.toml, ...) resolved against the built-in table and the user's
config into a ready client. No SDK is imported here."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

from plait.adapters.models._catalog import KIND_DEFAULTS, builtin_capabilities, with_overrides
from plait.adapters.models._common import Target
from plait.adapters.models._driver import DEFAULT_IDLE_TIMEOUT, missing_key
from plait.application.ports import ModelCapabilities
from plait.config import Config
from plait.domain.errors import ConfigError
from plait.domain.record import record

if TYPE_CHECKING:
    from plait.application.ports import ModelClient
    from plait.domain.tools import ToolSpec

__all__ = ["MODEL_SPEC_FORMS", "ModelSpec", "Resolved", "open_model", "parse_spec", "resolve"]

MODEL_SPEC_FORMS = (
    "openai:MODEL, openai-responses:MODEL, anthropic:MODEL, gemini:MODEL, "
    "openai-compatible:BASE_URL#MODEL, scripted:PATH, or a name from [models.NAME] in plait.toml"
)
_KINDS = ("openai", "openai-responses", "anthropic", "gemini", "openai-compatible", "scripted")
_KEY_ENV = {
    "openai": ("OPENAI_API_KEY",),
    "openai-responses": ("OPENAI_API_KEY",),
    "anthropic": ("ANTHROPIC_API_KEY",),
    "gemini": ("GEMINI_API_KEY", "GOOGLE_API_KEY"),
}
_CAPABILITY_KEYS = frozenset(f.name for f in fields(ModelCapabilities))


@record(kw_only=True)
class ModelSpec:
    kind: str
    model: str
    base_url: str | None = None

    def __str__(self) -> str:
        if self.kind == "openai-compatible":
            return f"{self.kind}:{self.base_url}#{self.model}"
        return f"{self.kind}:{self.model}"


def parse_spec(spec: str) -> ModelSpec:
    kind, sep, rest = spec.partition(":")
    if not sep or not rest:
        raise ConfigError(
            f"model spec {spec!r} is not of the form KIND:NAME; accepted: {MODEL_SPEC_FORMS}",
            spec=spec,
        )
    if kind not in _KINDS:
        raise ConfigError(
            f"unknown model kind {kind!r} in {spec!r}; accepted: {MODEL_SPEC_FORMS}", spec=spec
        )
    if kind != "openai-compatible":
        return ModelSpec(kind=kind, model=rest)
    base_url, hash_, model = rest.rpartition("#")
    url = urlparse(base_url)
    if not hash_ or not model or url.scheme not in ("http", "https") or not url.netloc:
        raise ConfigError(
            f"model spec {spec!r}: write openai-compatible:BASE_URL#MODEL, e.g. "
            "openai-compatible:http://localhost:8000/v1#Qwen/Qwen3-8B",
            spec=spec,
        )
    return ModelSpec(kind=kind, model=model, base_url=base_url.rstrip("/"))


@record(kw_only=True)
class Resolved:
    """Everything needed to build a client, after the config file had its say."""

    spec: ModelSpec
    target: Target
    capabilities: ModelCapabilities
    base_url: str | None
    key_env: tuple[str, ...]
    settings: Mapping[str, Any] = field(default_factory=dict)
    known: bool = False
    """In the built-in table or declared in the config (else: assumed defaults)."""


def _vendor(spec: ModelSpec) -> tuple[str, str | None, tuple[str, ...]]:
    """(vendor, built-in table, default key variables)."""
    if spec.kind == "openai-compatible":
        host = urlparse(spec.base_url or "").hostname or ""
        if host.endswith("deepseek.com"):
            return "deepseek", "deepseek", ("DEEPSEEK_API_KEY",)
        if host.endswith("openrouter.ai"):
            return f"openai-compatible:{spec.base_url}", None, ("OPENROUTER_API_KEY",)
        return f"openai-compatible:{spec.base_url}", None, ()
    vendor = {"gemini": "google", "openai-responses": "openai"}.get(spec.kind, spec.kind)
    return vendor, spec.kind, _KEY_ENV[spec.kind]


def resolve(name: str, config: Config) -> Resolved:
    alias = config.entry(name)
    spec = parse_spec(alias.spec if alias and alias.spec else name)
    entries = [entry for entry in (config.entry(str(spec)), alias) if entry is not None]
    settings: dict[str, Any] = {}
    base_url, key_env = spec.base_url, None
    for entry in entries:
        settings.update(entry.settings)
        base_url = entry.base_url or base_url
        key_env = entry.key_env or key_env
    vendor, table, default_keys = _vendor(spec)
    builtin = builtin_capabilities(table, spec.model) if table else None
    caps = with_overrides(
        builtin or KIND_DEFAULTS, **{k: v for k, v in settings.items() if k in _CAPABILITY_KEYS}
    )
    adapter = {"openai-compatible": "openai-chat", "openai": "openai-chat"}.get(
        spec.kind, spec.kind
    )
    return Resolved(
        spec=spec,
        target=Target(vendor=vendor, adapter=adapter, model=spec.model),
        capabilities=caps,
        base_url=base_url,
        key_env=(key_env,) if key_env else default_keys,
        settings=settings,
        known=builtin is not None or bool(entries),
    )


def _api_key(resolved: Resolved, env: Mapping[str, str]) -> str:
    for variable in resolved.key_env:
        if env.get(variable):
            return env[variable]
    if not resolved.key_env:
        return "not-needed"  # a local server without auth; never send another vendor's key
    raise missing_key(str(resolved.spec), resolved.key_env[0])


_MIN_THINKING = 1024
"""Anthropic's smallest extended-thinking budget (``budget_tokens``)."""


def _check_settings(resolved: Resolved) -> None:
    budget = resolved.settings.get("thinking_budget")
    if budget is not None and (
        resolved.spec.kind != "anthropic" or not resolved.capabilities.reasoning
    ):
        raise ConfigError(
            f"setting thinking_budget: model {resolved.spec} cannot take it (only Anthropic models "
            "with reasoning do); remove it from plait.toml",
            setting="thinking_budget",
            model=str(resolved.spec),
        )
    cap = resolved.capabilities.max_output_tokens
    if budget is not None and (budget < _MIN_THINKING or (cap is not None and budget >= cap)):
        within = f" and below the model's max output ({cap})" if cap is not None else ""
        raise ConfigError(
            f"setting thinking_budget = {budget}: model {resolved.spec} takes a thinking budget of "
            f"at least {_MIN_THINKING} tokens{within}; change it in plait.toml",
            setting="thinking_budget",
            model=str(resolved.spec),
        )


def build_client(resolved: Resolved, env: Mapping[str, str]) -> ModelClient:
    _check_settings(resolved)
    key = _api_key(resolved, env)
    idle = _idle_timeout(resolved)
    common: dict[str, Any] = {
        "name": str(resolved.spec),
        "target": resolved.target,
        "capabilities": resolved.capabilities,
        "api_key": key,
        "base_url": resolved.base_url,
        "idle_timeout": idle,
        "timeout": max(600.0, idle + 60.0),  # the SDK's own: only a backstop
    }
    if resolved.spec.kind in ("openai", "openai-responses", "openai-compatible"):
        # lazy: a provider's client module (~15 ms with email.utils), only for its models
        from plait.adapters.models._openai_client import CHAT, RESPONSES, OpenAIModel

        compatible = resolved.spec.kind == "openai-compatible"
        return OpenAIModel(
            protocol=RESPONSES if resolved.spec.kind == "openai-responses" else CHAT,
            provider=resolved.target.vendor.split(":")[0] if compatible else "openai",
            max_tokens_field="max_tokens" if compatible else "max_completion_tokens",
            **common,
        )
    if resolved.spec.kind == "anthropic":
        # lazy: a provider's client module (~15 ms with email.utils), only for its models
        from plait.adapters.models._anthropic_client import AnthropicModel

        return AnthropicModel(thinking_budget=resolved.settings.get("thinking_budget"), **common)
    # lazy: a provider's client module (~10 ms with email.utils), only for its models
    from plait.adapters.models._gemini_client import GeminiModel

    return GeminiModel(**common)


def _idle_timeout(resolved: Resolved) -> float:
    seconds = resolved.settings.get("idle_timeout_seconds", DEFAULT_IDLE_TIMEOUT)
    if not seconds > 0:
        raise ConfigError(
            f"setting idle_timeout_seconds of model {resolved.spec} must be more than 0 seconds "
            f"(got {seconds!r})",
            setting="idle_timeout_seconds",
            model=str(resolved.spec),
        )
    return float(seconds)


def check_tools(resolved: Resolved, tools: Sequence[ToolSpec]) -> None:
    """Translate every tool schema now, so an inexpressible one fails before a run."""
    if resolved.spec.kind == "gemini":
        # lazy: the Gemini translation (~12 ms), only for Gemini models
        from plait.adapters.models._gemini import tool_declaration

        for tool in tools:
            tool_declaration(tool)


def open_model(
    spec: str,
    *,
    tools: Sequence[ToolSpec] = (),
    config: Config,
    env: Mapping[str, str],
) -> ModelClient:
    """A model client for ``spec`` (see :data:`MODEL_SPEC_FORMS`), with its capabilities
    from the built-in table and ``config`` (plait.toml), its key looked up in ``env``
    (:attr:`plait.settings.Settings.environ`); fails here, with a clear error, on a bad
    spec, a missing key, a setting the model cannot honour or a tool schema it cannot
    take."""
    if spec.startswith("scripted:"):
        # lazy: the scripted model and difflib (~17 ms), only for scripted: specs
        from plait.testing.scripted import ScriptedModel

        return ScriptedModel.from_file(Path(parse_spec(spec).model))
    resolved = resolve(spec, config)
    client = build_client(resolved, env)
    check_tools(resolved, tools)
    return client
