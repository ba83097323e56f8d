"""A loopback OTLP/HTTP receiver for the tests: decodes the protobuf export requests with
``opentelemetry-proto`` and keeps every span and metric name it was sent."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

__all__ = ["Received", "ReceivedSpan", "otlp_receiver"]


@dataclass(frozen=True)
class ReceivedSpan:
    name: str
    trace_id: str
    span_id: str
    parent_span_id: str
    links: tuple[tuple[str, str], ...]
    """(trace id, span id) of each link."""
    attributes: dict[str, Any]
    service: str
    status_code: int


@dataclass
class Received:
    spans: list[ReceivedSpan] = field(default_factory=list)
    metrics: set[str] = field(default_factory=set)
    headers: list[dict[str, str]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    endpoint: str = ""


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return tuple(_value(v) for v in value.array_value.values)
    return None if kind is None else getattr(value, kind)


def _decode_traces(body: bytes) -> list[ReceivedSpan]:
    request = ExportTraceServiceRequest()
    request.ParseFromString(body)
    out = []
    for resource_spans in request.resource_spans:
        resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                out.append(
                    ReceivedSpan(
                        name=span.name,
                        trace_id=span.trace_id.hex(),
                        span_id=span.span_id.hex(),
                        parent_span_id=span.parent_span_id.hex(),
                        links=tuple((x.trace_id.hex(), x.span_id.hex()) for x in span.links),
                        attributes={a.key: _value(a.value) for a in span.attributes},
                        service=str(resource.get("service.name", "")),
                        status_code=span.status.code,
                    )
                )
    return out


def _decode_metrics(body: bytes) -> set[str]:
    request = ExportMetricsServiceRequest()
    request.ParseFromString(body)
    return {
        metric.name
        for resource_metrics in request.resource_metrics
        for scope_metrics in resource_metrics.scope_metrics
        for metric in scope_metrics.metrics
    }


@contextmanager
def otlp_receiver() -> Iterator[Received]:
    """A server on 127.0.0.1 (a free port) for the duration; ``endpoint`` is its base URL
    (what ``OTEL_EXPORTER_OTLP_ENDPOINT`` takes)."""
    received = Received()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            with received.lock:
                received.headers.append({k.lower(): v for k, v in self.headers.items()})
                if self.path == "/v1/traces":
                    received.spans.extend(_decode_traces(body))
                    reply = ExportTraceServiceResponse().SerializeToString()
                elif self.path == "/v1/metrics":
                    received.metrics |= _decode_metrics(body)
                    reply = ExportMetricsServiceResponse().SerializeToString()
                else:
                    self.send_error(404)
                    return
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(reply)))
            self.end_headers()
            self.wfile.write(reply)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    received.endpoint = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield received
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
