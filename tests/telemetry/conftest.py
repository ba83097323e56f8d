"""In-memory OpenTelemetry providers for the telemetry tests."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from plait.adapters.telemetry._otel import OtelTelemetry


@dataclass
class Otel:
    telemetry: OtelTelemetry
    spans: InMemorySpanExporter
    metrics: InMemoryMetricReader

    def finished(self) -> list[ReadableSpan]:
        return list(self.spans.get_finished_spans())

    def points(self, name: str) -> list[tuple[dict[str, object], object]]:
        """(attributes, value: sum or histogram sum) of metric ``name``'s data points."""
        data = self.metrics.get_metrics_data()
        out: list[tuple[dict[str, object], object]] = []
        for resource in data.resource_metrics if data else ():
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    if metric.name == name:
                        for point in metric.data.data_points:
                            value = getattr(point, "sum", getattr(point, "value", None))
                            out.append((dict(point.attributes or {}), value))
        return out


def parent_id(span: ReadableSpan) -> int | None:
    """The span id of ``span``'s parent (a stored parent is remote, a live one is not)."""
    return None if span.parent is None else span.parent.span_id


def make_otel(*, capture_content: bool = False) -> Otel:
    spans = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(spans))
    metrics = InMemoryMetricReader()
    telemetry = OtelTelemetry(
        tracer_provider=tracer_provider,
        meter_provider=MeterProvider(metric_readers=[metrics]),
        capture_content=capture_content,
    )
    return Otel(telemetry, spans, metrics)


@pytest.fixture
def otel() -> Iterator[Otel]:
    otel = make_otel()
    yield otel
    otel.telemetry.shutdown()
