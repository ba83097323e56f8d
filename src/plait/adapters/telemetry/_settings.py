"""The ``[telemetry]`` table of plait.toml, checked (no OpenTelemetry import)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from plait.domain.errors import ConfigError
from plait.domain.record import record

__all__ = ["EXPORTERS", "TelemetrySettings"]

EXPORTERS = ("otlp", "console", "none")
_KEYS = ("enabled", "capture_content", "exporter", "service_name", "span_processor")
_CAPTURE_ENV = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"


@record(kw_only=True)
class TelemetrySettings:
    """``enabled``: emit traces and metrics (off by default). ``capture_content``: record
    message contents, tool arguments and tool results on spans (the GenAI conventions'
    opt-in; also ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true``).
    ``exporter``: ``otlp`` (OTLP/HTTP; endpoint, headers and protocol from the standard
    ``OTEL_EXPORTER_OTLP_*`` variables), ``console`` or ``none``; ``OTEL_TRACES_EXPORTER``
    overrides it when set. ``service_name``: default ``OTEL_SERVICE_NAME``, else ``plait``.
    ``span_processor``: ``batch`` (default) or ``simple`` (each span exported when it ends:
    nothing lost when the process is killed, at a cost per span)."""

    enabled: bool = False
    capture_content: bool = False
    exporter: str = "otlp"
    service_name: str | None = None
    span_processor: str = "batch"

    @classmethod
    def from_mapping(
        cls, table: Mapping[str, Any], env: Mapping[str, str] | None = None
    ) -> TelemetrySettings:
        env = env or {}
        for key, value in table.items():
            if key not in _KEYS:
                raise ConfigError(f"unknown key {key!r}; known keys: {', '.join(_KEYS)}", key=key)
            wanted = bool if key in ("enabled", "capture_content") else str
            if not isinstance(value, wanted):
                raise ConfigError(
                    f"{key} must be a {wanted.__name__}, got {type(value).__name__}", key=key
                )
        exporter = env.get("OTEL_TRACES_EXPORTER") or table.get("exporter", "otlp")
        if exporter not in EXPORTERS:
            raise ConfigError(
                f"exporter {exporter!r} is not one of {', '.join(EXPORTERS)}", key="exporter"
            )
        processor = table.get("span_processor", "batch")
        if processor not in ("batch", "simple"):
            raise ConfigError(
                f"span_processor {processor!r} is not 'batch' or 'simple'", key="span_processor"
            )
        capture = table.get("capture_content", False) or (
            env.get(_CAPTURE_ENV, "").strip().lower() == "true"
        )
        return cls(
            enabled=table.get("enabled", False),
            capture_content=capture,
            exporter=exporter,
            service_name=table.get("service_name"),
            span_processor=processor,
        )
