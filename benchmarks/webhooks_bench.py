"""What webhooks cost: runs finished with and without a subscribed endpoint (the outbox
triggers' share of a run's commits), then how fast one delivery loop empties the outbox
into a local receiver.

    uv run python benchmarks/webhooks_bench.py [--runs 300] [--pg URL]

Each run is one user message and one answer (a function model, no tools) driven by
``AgentService.send`` on a SQLite store (WAL, synchronous=FULL) in a temporary directory,
or on the PostgreSQL store at ``--pg URL``. Timed: the wall time of ``--runs`` sends
without any endpoint, then with one endpoint subscribed to ``run.finished`` (so every
run's last commit also writes an event and a delivery), then the time one
``WebhookDispatcher`` (batches of 16, httpx) takes to deliver them all to a threaded
``http.server`` receiver on loopback that answers 204 without checking signatures.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from plait.adapters.stores import open_store
from plait.adapters.system import RandomIds, SystemClock
from plait.adapters.webhook_sender import HttpxSender
from plait.application.ports import ModelRequest, ModelResponse
from plait.application.service import AgentService
from plait.application.webhooks import WebhookDispatcher, WebhookService
from plait.testing import FunctionModel


class _Server(ThreadingHTTPServer):
    request_queue_size = 128  # 16 deliveries connect at once
    daemon_threads = True


class _Quiet(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as a real receiver

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length", "0")))
        self.send_response(204)
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        return


def _answer(request: ModelRequest) -> ModelResponse:
    return ModelResponse(text="done")


async def _sends(service: AgentService, runs: int) -> float:
    started = time.perf_counter()
    for _ in range(runs):
        session = await service.create_session(owner="ana")
        await service.send(session.id, "hi")
    return time.perf_counter() - started


async def main(url: str, runs: int) -> None:
    store: Any = open_store(url)
    clock, ids = SystemClock(), RandomIds()
    service = AgentService.build(
        store=store,
        artifacts=store,
        model=FunctionModel(_answer, name="m"),
        clock=clock,
        ids=ids,
    )
    server = _Server(("127.0.0.1", 0), _Quiet)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    sender = HttpxSender(timeout=10.0)
    try:
        await _sends(service, 20)  # warm-up
        plain = await _sends(service, runs)
        hooks = WebhookService(store=store, clock=clock, ids=ids)
        port = server.server_address[1]
        await hooks.add(f"http://127.0.0.1:{port}/", ["run.finished"], principal=None)
        hooked = await _sends(service, runs)
        dispatcher = WebhookDispatcher(store=store, sender=sender, clock=clock, owner="bench")
        started = time.perf_counter()
        sent = 0
        while claimed := await dispatcher.run_once():
            sent += claimed
        drained = time.perf_counter() - started
        print(f"store {url.split('://')[0]}, {runs} runs")
        print(f"  send, no endpoint:    {plain / runs * 1000:.2f} ms per run")
        print(f"  send, one endpoint:   {hooked / runs * 1000:.2f} ms per run")
        print(f"  delivered {sent} in {drained:.2f} s: {sent / drained:.0f} deliveries/s")
    finally:
        await sender.close()
        server.shutdown()
        await store.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=300)
    parser.add_argument("--pg", help="a PostgreSQL URL (default: a temporary SQLite file)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        db = args.pg or f"sqlite:///{Path(tmp) / 'bench.db'}"
        asyncio.run(main(db, args.runs))
