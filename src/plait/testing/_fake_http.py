"""A loopback HTTP server that answers each POST with the next scripted reply (JSON, or
server-sent events that may be cut off midway) and records every request."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Mapping
from dataclasses import field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from plait.domain.record import record

__all__ = ["FakeHttpServer", "RecordedRequest", "Reply"]


@record(kw_only=True)
class Reply:
    """One answer: a JSON ``body``, or ``events`` sent as server-sent events
    (``(event name or None, payload)``). ``cut_after`` sends that many events and then
    drops the connection mid-body, as a failing network or server would."""

    status: int = 200
    body: Any = None
    events: tuple[tuple[str | None, Any], ...] | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    cut_after: int | None = None
    stall: bool = False
    stall_after: int = 0
    pause: float = 0.0


@record
class RecordedRequest:
    method: str
    path: str
    headers: dict[str, str]
    body: Any


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = raw.decode("utf-8", "replace")
        request = RecordedRequest(
            "POST", self.path, {k.lower(): v for k, v in self.headers.items()}, body
        )
        reply = self.server.owner._next(request)
        if reply.stall and reply.events is None:
            self.server.owner.closing.wait()
            return
        if reply.events is None:
            self._json(reply)
        else:
            self._stream(reply)

    def _json(self, reply: Reply) -> None:
        data = json.dumps(reply.body).encode()
        self.send_response(reply.status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        for name, value in reply.headers.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def _stream(self, reply: Reply) -> None:
        self.send_response(reply.status)
        self.send_header("content-type", "text/event-stream")
        self.send_header("transfer-encoding", "chunked")
        for header, value in reply.headers.items():
            self.send_header(header, value)
        self.end_headers()
        for number, (name, payload) in enumerate(reply.events or ()):
            if reply.stall and number >= reply.stall_after:
                self.wfile.flush()
                self.server.owner.closing.wait()
                return
            if reply.pause:
                self.wfile.flush()
                if self.server.owner.closing.wait(reply.pause):
                    return
            if reply.cut_after is not None and number >= reply.cut_after:
                self.wfile.flush()
                self.close_connection = True
                self.connection.shutdown(2)  # no terminating chunk: the body is cut off
                return
            text = (f"event: {name}\n" if name else "") + f"data: {json.dumps(payload)}\n\n"
            chunk = text.encode()
            self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
        self.wfile.write(b"0\r\n\r\n")


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    owner: FakeHttpServer


class FakeHttpServer:
    """Serve ``replies`` in order (or ask ``reply_for`` per request) on 127.0.0.1."""

    def __init__(
        self,
        replies: list[Reply] | None = None,
        *,
        reply_for: Callable[[RecordedRequest], Reply] | None = None,
    ) -> None:
        self._replies = list(replies or [])
        self._reply_for = reply_for
        self._lock = threading.Lock()
        self.closing = threading.Event()
        """Set when the server closes: stalled replies end then."""
        self.requests: list[RecordedRequest] = []
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.owner = self
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def add(self, *replies: Reply) -> None:
        with self._lock:
            self._replies.extend(replies)

    @property
    def pending(self) -> int:
        with self._lock:
            return len(self._replies)

    def _next(self, request: RecordedRequest) -> Reply:
        with self._lock:
            self.requests.append(request)
            if self._reply_for is not None:
                return self._reply_for(request)
            if not self._replies:
                return Reply(status=500, body={"error": {"message": "fake server: no reply left"}})
            return self._replies.pop(0)

    def start(self) -> FakeHttpServer:
        self._thread.start()
        return self

    def close(self) -> None:
        self.closing.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> FakeHttpServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()
