"""Telemetry: OpenTelemetry traces and metrics of runs under the GenAI semantic
conventions (docs/design.md#surfaces), behind the :class:`~plait.application.ports.RunTelemetry`
port.

Off by default. Nothing here imports OpenTelemetry until :func:`open_telemetry` is called
with telemetry enabled; the SDK is the optional extra ``plait[otel]``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from plait.adapters.telemetry._settings import TelemetrySettings
from plait.domain.errors import ConfigError

if TYPE_CHECKING:
    from plait.adapters.telemetry._otel import OtelTelemetry

__all__ = ["TelemetrySettings", "open_telemetry"]


def open_telemetry(settings: TelemetrySettings) -> OtelTelemetry | None:
    """The OpenTelemetry adapter for ``settings`` (``None`` when telemetry is off). A
    ConfigError naming the extra to install when the SDK is missing."""
    if not settings.enabled:
        return None
    try:
        # lazy: the OpenTelemetry SDK is an optional extra (a clear error when missing)
        from plait.adapters.telemetry._otel import OtelTelemetry
    except ImportError as exc:
        raise ConfigError(
            f"[telemetry] enabled = true needs the OpenTelemetry SDK, which is not installed "
            f"({exc.name or exc}): install the extra, e.g. pip install 'plait[otel]' "
            "(uv: uv sync --extra otel)",
            missing=exc.name or "",
        ) from exc
    return OtelTelemetry.from_settings(settings)
