"""An internal error answers ``500 internal`` in the one error shape without closing the
keep-alive connection (Starlette's ``Exception`` handler re-raises after answering, and
uvicorn then drops the connection; plait's middleware answers and returns), and is logged
once as a structured JSON record with the request's run or session id and the traceback,
while the answer leaks nothing."""

from __future__ import annotations

import asyncio
import http.client
import json
import logging
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import pytest

from plait.adapters.stores.memory.store import MemoryStore
from plait.domain.errors import ModelError
from plait.domain.service import Role
from plait.entrypoints.http.app import create_app
from plait.entrypoints.http.auth import create_key
from plait.entrypoints.http.server import JsonLogs, Settings, context_for
from plait.runtime import Runtime
from plait.testing import FixedClock, SequentialIds
from tests.http.conftest import start_server


class _Broken(MemoryStore):
    """Sessions: an unexpected exception; runs: a plait error no status maps to."""

    async def get_session(self, session_id: str) -> Any:
        raise RuntimeError("disk on fire at /secret/path")

    async def get_run(self, run_id: str) -> Any:
        raise ModelError("provider down: key sk-secret", run_id=run_id)


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.setFormatter(JsonLogs())
        self.lines: list[dict[str, Any]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(json.loads(self.format(record)))


@pytest.fixture
def broken() -> Iterator[tuple[str, str, _Lines]]:
    store = _Broken()
    rt = Runtime(
        store=store, artifacts=store, model=None, tools=[], clock=FixedClock(),
        ids=SequentialIds(),
    )  # fmt: skip
    _, key = asyncio.run(
        create_key(store, principal="ana", role=Role.USER, clock=FixedClock(), ids=SequentialIds())
    )
    lines = _Lines()
    logger = logging.getLogger("plait.http")
    logger.addHandler(lines)
    app = create_app(context_for(rt, Settings(db="memory://", serve_workers=0)))
    server, thread, url = start_server(app)
    try:
        yield url, key, lines
    finally:
        server.should_exit = True
        thread.join(timeout=20)
        logger.removeHandler(lines)


def _get(conn: http.client.HTTPConnection, path: str, key: str) -> tuple[int, dict[str, Any]]:
    conn.request("GET", path, headers={"Authorization": f"Bearer {key}"})
    r = conn.getresponse()
    body = json.loads(r.read())
    assert r.getheader("connection") != "close"
    return r.status, body


def _internal(status: int, body: dict[str, Any]) -> None:
    assert status == 500
    assert body == {
        "error": {
            "code": "internal",
            "message": "the server could not complete the request",
            "details": {},
        }
    }


def test_an_internal_error_is_answered_and_the_connection_lives_on(
    broken: tuple[str, str, _Lines],
) -> None:
    url, key, lines = broken
    where = urlsplit(url)
    conn = http.client.HTTPConnection(where.hostname or "", where.port, timeout=10)
    try:
        _internal(*_get(conn, "/v1/sessions/ses_1", key))
        sock = conn.sock
        assert sock is not None
        _internal(*_get(conn, "/v1/runs/run_9", key))  # a plait error without a status
        assert conn.sock is sock  # the same connection answered
        status, body = _get(conn, "/v1/health", key)
        assert (status, body, conn.sock is sock) == (200, {"status": "ok"}, True)
    finally:
        conn.close()
    by_path = {line.get("path"): line for line in lines.lines if line["level"] == "error"}
    assert set(by_path) == {"/v1/sessions/ses_1", "/v1/runs/run_9"}  # each logged once
    assert len([x for x in lines.lines if x["level"] == "error"]) == 2
    session = by_path["/v1/sessions/ses_1"]
    assert (session["logger"], session["session_id"], session["method"]) == (
        "plait.http",
        "ses_1",
        "GET",
    )
    assert "RuntimeError: disk on fire" in session["msg"] and "Traceback" in session["exc"]
    run = by_path["/v1/runs/run_9"]
    assert (run["run_id"], run["code"]) == ("run_9", "model_error")
    assert "provider down" in run["msg"] and "exc" in run
