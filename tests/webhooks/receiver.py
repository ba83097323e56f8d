"""A local webhook receiver for the tests: verifies every request with the Standard
Webhooks reference library (``standardwebhooks``), records what came on the wire and
deduplicates by ``webhook-id`` as a receiver should. It can answer with an error status,
hold requests until released, or be stopped and started again on the same port."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from standardwebhooks.webhooks import Webhook, WebhookVerificationError


class _Server(ThreadingHTTPServer):
    request_queue_size = 64  # a batch of deliveries connects at once
    daemon_threads = True


class Receiver:
    def __init__(self, port: int = 0) -> None:
        self.secret: str | None = None
        self.status = 200
        self.wire: list[str] = []
        """Verified webhook ids in the order they came, duplicates included."""
        self.events: dict[str, dict[str, Any]] = {}
        """The deduplicated deliveries: payload by webhook id."""
        self.rejected: list[str] = []
        self.hosts: list[str] = []
        """The ``Host`` header of every request."""
        self.hold: threading.Event | None = None
        """When set to an unset Event: requests wait for it (after being recorded)."""
        self.arrived = threading.Event()
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.port = port
        self.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    def start(self) -> None:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", "0")))
                receiver.receive(self, body)

            def log_message(self, *args: Any) -> None:
                return

        self._server = _Server(("127.0.0.1", self.port), Handler)
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def receive(self, handler: BaseHTTPRequestHandler, body: bytes) -> None:
        headers = {k: v for k, v in handler.headers.items()}
        with self._lock:
            self.hosts.append(handler.headers.get("host", ""))
        assert self.secret is not None
        try:
            payload = Webhook(self.secret).verify(body, headers)
        except WebhookVerificationError as e:
            with self._lock:
                self.rejected.append(str(e))
            handler.send_response(400)
            handler.end_headers()
            return
        msg_id = headers["webhook-id"]
        with self._lock:
            self.wire.append(msg_id)
            self.events.setdefault(msg_id, payload)
        self.arrived.set()
        if self.hold is not None:
            self.hold.wait(60)
        handler.send_response(self.status)
        handler.end_headers()
        handler.wfile.write(json.dumps({"ok": self.status < 300}).encode())
