"""Token meters (docs/design.md#compaction): exact offline counts for OpenAI's encodings, a
conservative estimate for every other model (corrected by reported usage in compaction), and a clear
``TOKEN_METER_MODEL_UNCONFIGURED`` error for a model plait knows nothing about."""

from __future__ import annotations

from typing import TYPE_CHECKING

from plait.adapters.models import resolve
from plait.adapters.tokens._estimate import DEFAULT_SAFETY, EstimatingMeter
from plait.adapters.tokens._openai import OpenAIMeter, encoding_for
from plait.domain.errors import ConfigError, TokenMeterModelUnconfiguredError

if TYPE_CHECKING:
    from plait.application.ports import ModelClient, TokenMeter
    from plait.config import Config

__all__ = [
    "DEFAULT_SAFETY",
    "EstimatingMeter",
    "OpenAIMeter",
    "encoding_for",
    "meter_for",
    "open_meter",
]

_OPENAI_KINDS = ("openai", "openai-responses")


def open_meter(spec: str, config: Config) -> TokenMeter:
    """The meter for a model spec (or a plait.toml name). Exact for OpenAI's models; an
    estimate for the others; a model that is neither built in nor declared with a
    context window in ``config`` (plait.toml) raises
    :class:`TokenMeterModelUnconfiguredError`."""
    resolved = resolve(spec, config)
    if not resolved.known or resolved.capabilities.context_window is None:
        raise TokenMeterModelUnconfiguredError(
            f"TOKEN_METER_MODEL_UNCONFIGURED: plait has no token meter and context window "
            f"for model {spec!r}; declare context_window under [models.NAME] in plait.toml",
            model=spec,
        )
    if resolved.spec.kind in _OPENAI_KINDS:
        return OpenAIMeter(encoding_for(resolved.spec.model))
    return EstimatingMeter(str(resolved.spec))


def meter_for(client: ModelClient, config: Config) -> TokenMeter:
    """The meter a runtime uses for ``client``'s context building: exact for OpenAI's
    models, otherwise an estimate (compaction separately refuses a model whose window is
    unknown)."""
    try:
        return open_meter(client.name, config)
    except ConfigError:  # a scripted model, an undeclared local model: estimate
        return EstimatingMeter(client.name)
