"""Slow or silent clients cannot hold connections open for ever (an attack found
slowloris connections never closed): a request head must be complete within the header
deadline, idle keep-alive connections close, and a request whose head arrived may take
as long as its answer needs. Real loopback sockets against uvicorn configured as
``plait serve`` configures it (short deadlines here)."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Iterator

import pytest
from fastapi import FastAPI

from tests.http.conftest import start_server

HEADER_TIMEOUT = 0.5
LIMIT = 20.0
"""How long the test waits for the server to close: far beyond the deadline (the test
checks that it closes, not how fast)."""


@pytest.fixture
def address() -> Iterator[tuple[str, int]]:
    app = FastAPI()

    @app.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/slow")
    async def slow() -> dict[str, str]:
        await asyncio.sleep(HEADER_TIMEOUT * 3)
        return {"status": "late"}

    server, thread, url = start_server(app, header_timeout=HEADER_TIMEOUT, keep_alive=1)
    host, port = url.removeprefix("http://").split(":")
    try:
        yield host, int(port)
    finally:
        server.should_exit = True
        thread.join(timeout=20)


def _closed_by_server(sock: socket.socket, trickle: list[bytes]) -> bool:
    """Send ``trickle`` a piece every 0.1 s (then nothing) until the server closes the
    connection; False if it is still open after ``LIMIT`` seconds."""
    sock.settimeout(0.1)
    deadline = time.monotonic() + LIMIT
    pieces = iter(trickle)
    while time.monotonic() < deadline:
        piece = next(pieces, None)
        try:
            if piece is not None:
                sock.sendall(piece)
            if sock.recv(4096) == b"":
                return True
        except TimeoutError:
            continue
        except (BrokenPipeError, ConnectionResetError):
            return True
    return False


def _forever_headers() -> list[bytes]:
    head = [b"GET /health HTTP/1.1\r\n", b"Host: x\r\n"]
    return head + [f"X-Slow-{n}: {n}\r\n".encode() for n in range(int(LIMIT * 10))]


def _get(path: str) -> bytes:
    return f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode()


def _read_response(sock: socket.socket) -> bytes:
    sock.settimeout(LIMIT)
    data = b""
    while b"\r\n\r\n" not in data or not data.rstrip().endswith(b"}"):
        chunk = sock.recv(4096)
        assert chunk, data
        data += chunk
    return data


@pytest.mark.slow
def test_slowloris_connection_sending_headers_slowly_is_closed(
    address: tuple[str, int],
) -> None:
    with socket.create_connection(address) as sock:
        assert _closed_by_server(sock, _forever_headers())


@pytest.mark.slow
def test_slowloris_silent_connection_is_closed(address: tuple[str, int]) -> None:
    with socket.create_connection(address) as sock:
        assert _closed_by_server(sock, [])


@pytest.mark.slow
def test_slowloris_after_a_keep_alive_response_is_closed(address: tuple[str, int]) -> None:
    with socket.create_connection(address) as sock:
        sock.sendall(_get("/health"))
        assert b" 200 " in _read_response(sock).split(b"\r\n", 1)[0]
        # The next request's head trickles in a byte at a time.
        assert _closed_by_server(sock, [bytes([b]) for b in _get("/health")[:-2] * 200])


@pytest.mark.slow
def test_a_request_whose_head_arrived_may_take_longer_than_the_deadline(
    address: tuple[str, int],
) -> None:
    with socket.create_connection(address) as sock:
        sock.sendall(_get("/slow"))
        answer = _read_response(sock)
        assert answer.startswith(b"HTTP/1.1 200 ")
        assert answer.endswith(b'{"status":"late"}')
        # Kept alive: a second request on the same connection is answered.
        sock.sendall(_get("/health"))
        assert _read_response(sock).endswith(b'{"status":"ok"}')


def test_a_request_head_over_16_kib_is_refused(address: tuple[str, int]) -> None:
    with socket.create_connection(address) as sock:
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * (17 * 1024))
        sock.settimeout(LIMIT)
        answer = b""
        while chunk := sock.recv(4096):
            answer += chunk
        assert answer.startswith(b"HTTP/1.1 400 "), answer[:200]
