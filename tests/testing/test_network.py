"""block_network: nothing leaves the machine, loopback still works."""

from __future__ import annotations

import asyncio
import socket
import threading
from pathlib import Path
from typing import Any

import pytest

from plait.testing import block_network
from plait.testing.network import is_local_address

REMOTE = ("192.0.2.1", 443)  # TEST-NET-1 (RFC 5737): never routed
REMOTE6 = ("2001:db8::1", 443, 0, 0)  # documentation prefix (RFC 3849)


@pytest.fixture
def spy(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Replace the real socket calls with recorders, *before* block_network patches them,
    so a test can see whether anything would have reached the OS."""
    calls: list[Any] = []

    def fake(name: str) -> Any:
        def record(*args: Any) -> Any:
            calls.append((name, args[1:] if args and isinstance(args[0], socket.socket) else args))
            return 0

        return record

    for name in ("connect", "connect_ex", "sendto"):
        monkeypatch.setattr(socket.socket, name, fake(name))
    for name in ("create_connection", "getaddrinfo", "gethostbyname"):
        monkeypatch.setattr(socket, name, fake(name))
    return calls


@pytest.mark.parametrize("address", [REMOTE, ("8.8.8.8", 53)])
def test_connect_to_a_remote_address_raises_before_reaching_the_os(
    spy: list[Any], address: tuple[str, int]
) -> None:
    with block_network(), socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        with pytest.raises(RuntimeError, match=r"^network access in tests"):
            sock.connect(address)
        with pytest.raises(RuntimeError, match=r"^network access in tests"):
            sock.connect_ex(address)
        with pytest.raises(RuntimeError, match=r"^network access in tests"):
            socket.create_connection(address, timeout=1)

    assert spy == []


def test_ipv6_and_datagrams_are_blocked(spy: list[Any]) -> None:
    with block_network():
        if socket.has_ipv6:
            with (
                socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as sock6,
                pytest.raises(RuntimeError, match="network access in tests"),
            ):
                sock6.connect(REMOTE6)
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
            with pytest.raises(RuntimeError, match="network access in tests"):
                udp.sendto(b"x", REMOTE)
            with pytest.raises(RuntimeError, match="network access in tests"):
                udp.sendto(b"x", 0, REMOTE)

    assert spy == []


def test_name_lookups_are_blocked_except_local_names(spy: list[Any]) -> None:
    with block_network():
        with pytest.raises(RuntimeError, match=r"name lookup of 'api\.openai\.com'"):
            socket.getaddrinfo("api.openai.com", 443)
        with pytest.raises(RuntimeError, match="network access in tests"):
            socket.gethostbyname("example.com")
        socket.getaddrinfo("localhost", 80)
        socket.getaddrinfo("192.0.2.1", 80)  # a literal resolves without any query
        socket.getaddrinfo(None, 80)

    assert [name for name, _ in spy] == ["getaddrinfo", "getaddrinfo", "getaddrinfo"]


def test_loopback_tcp_server_still_works() -> None:
    with socket.create_server(("127.0.0.1", 0)) as server, block_network():
        port = server.getsockname()[1]

        def serve() -> None:
            conn, _ = server.accept()
            with conn:
                conn.sendall(conn.recv(16).upper())

        thread = threading.Thread(target=serve)
        thread.start()
        with socket.create_connection(("127.0.0.1", port), timeout=5) as client:
            client.sendall(b"ping")
            reply = client.recv(16)
        thread.join(5)

    assert reply == b"PING"


def test_loopback_asyncio_server_by_name_still_works() -> None:
    async def exchange() -> bytes:
        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            writer.write((await reader.readline()).upper())
            await writer.drain()
            writer.close()
            await writer.wait_closed()

        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        async with server:
            reader, writer = await asyncio.open_connection("localhost", port)
            writer.write(b"hello\n")
            line = await reader.readline()
            writer.close()
            await writer.wait_closed()
        return line

    with block_network():
        assert asyncio.run(exchange()) == b"HELLO\n"


def test_asyncio_connection_to_a_remote_host_is_blocked() -> None:
    async def connect() -> None:
        await asyncio.open_connection(*REMOTE)

    with block_network(), pytest.raises(RuntimeError, match="network access in tests"):
        asyncio.run(connect())


def test_unix_sockets_still_work(tmp_path: Path) -> None:
    path = str(tmp_path / "s.sock")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as server:
        server.bind(path)
        server.listen(1)
        with block_network(), socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
            client.connect(path)
            conn, _ = server.accept()
            with conn:
                client.sendall(b"x")
                assert conn.recv(1) == b"x"


def test_everything_is_restored_on_exit() -> None:
    before = (socket.socket.connect, socket.create_connection, socket.getaddrinfo)

    with block_network():
        with block_network():
            pass
        assert socket.socket.connect is not before[0]

    assert (socket.socket.connect, socket.create_connection, socket.getaddrinfo) == before


@pytest.mark.parametrize(
    ("host", "local"),
    [
        ("127.0.0.1", True),
        ("127.8.9.10", True),
        ("::1", True),
        ("::ffff:127.0.0.1", True),
        ("0.0.0.0", True),
        ("", True),
        ("localhost", True),
        ("LOCALHOST.", True),
        ("db.localhost", True),
        (b"127.0.0.1", True),
        ("10.0.0.1", False),
        ("8.8.8.8", False),
        ("2001:db8::1", False),
        ("example.com", False),
        (None, False),
    ],
)
def test_is_local_address(host: object, local: bool) -> None:
    assert is_local_address(host) is local
