"""Make real network access impossible in tests.

:func:`block_network` patches the socket module so that connecting (or sending a datagram,
or resolving a host name) to anything but the local machine raises
``RuntimeError("network access in tests: ...")`` before any packet leaves. Loopback
(127.0.0.0/8, ``::1``, ``localhost``) and Unix sockets keep working, so a test can still
talk to a server it started itself.

With pytest, load the autouse fixture in your root ``conftest.py``::

    pytest_plugins = ["plait.testing.pytest_plugin"]

and mark the rare test that really needs the network with ``@pytest.mark.allow_network``.
"""

from __future__ import annotations

import contextlib
import ipaddress
import socket
from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["block_network", "is_local_address"]

_MESSAGE = "network access in tests"
_GUARDED_FAMILIES = (socket.AF_INET, socket.AF_INET6)


def is_local_address(host: object) -> bool:
    """True for loopback and unspecified addresses and ``localhost`` names."""
    if isinstance(host, bytes):
        host = host.decode("ascii", errors="replace")
    if not isinstance(host, str):
        return False
    name = host.lower().rstrip(".")
    if name in ("", "localhost") or name.endswith(".localhost"):
        return True
    try:
        address = ipaddress.ip_address(name.split("%", 1)[0])
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return address.is_loopback or address.is_unspecified


def _is_numeric(host: str) -> bool:
    try:
        ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return False
    return True


def _refuse(what: str, target: object) -> RuntimeError:
    return RuntimeError(f"{_MESSAGE}: {what} {target!r} blocked by plait.testing.block_network()")


def _check_address(family: int, address: object, what: str) -> None:
    if family not in _GUARDED_FAMILIES or not isinstance(address, tuple) or not address:
        return
    if not is_local_address(address[0]):
        raise _refuse(what, address)


@contextlib.contextmanager
def block_network() -> Iterator[None]:
    """Within the block, any attempt to reach a non-local address raises RuntimeError.

    Patches ``socket.socket.connect``, ``connect_ex`` and ``sendto``, and
    ``socket.create_connection``, ``socket.getaddrinfo`` and ``socket.gethostbyname``
    (name lookups would send DNS queries). Nests; everything is restored on exit.
    """
    sock_cls = socket.socket
    saved: dict[tuple[Any, str], Any] = {
        (sock_cls, "connect"): sock_cls.connect,
        (sock_cls, "connect_ex"): sock_cls.connect_ex,
        (sock_cls, "sendto"): sock_cls.sendto,
        (socket, "create_connection"): socket.create_connection,
        (socket, "getaddrinfo"): socket.getaddrinfo,
        (socket, "gethostbyname"): socket.gethostbyname,
    }
    patches = _guards(sock_cls)
    for (owner, attribute), value in patches.items():
        setattr(owner, attribute, value)
    try:
        yield
    finally:
        for (owner, attribute), value in saved.items():
            setattr(owner, attribute, value)


def _guards(sock_cls: type[socket.socket]) -> dict[tuple[Any, str], Any]:
    """Replacements for the socket functions, each checking the address and then calling
    the function it replaces."""
    connect: Callable[..., Any] = sock_cls.connect
    connect_ex: Callable[..., Any] = sock_cls.connect_ex
    sendto: Callable[..., Any] = sock_cls.sendto
    create_connection: Callable[..., Any] = socket.create_connection
    getaddrinfo: Callable[..., Any] = socket.getaddrinfo
    gethostbyname: Callable[..., Any] = socket.gethostbyname

    def guarded_connect(self: socket.socket, address: Any) -> Any:
        _check_address(self.family, address, "connection to")
        return connect(self, address)

    def guarded_connect_ex(self: socket.socket, address: Any) -> Any:
        _check_address(self.family, address, "connection to")
        return connect_ex(self, address)

    def guarded_sendto(self: socket.socket, data: Any, *args: Any) -> Any:
        if args:
            _check_address(self.family, args[-1], "datagram to")
        return sendto(self, data, *args)

    def guarded_create_connection(address: Any, *args: Any, **kwargs: Any) -> Any:
        _check_address(socket.AF_INET, tuple(address), "connection to")
        return create_connection(address, *args, **kwargs)

    def guarded_getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
        if host is not None and not is_local_address(host) and not _is_numeric(_text(host)):
            raise _refuse("name lookup of", host)
        return getaddrinfo(host, *args, **kwargs)

    def guarded_gethostbyname(host: Any) -> Any:
        if not is_local_address(host) and not _is_numeric(_text(host)):
            raise _refuse("name lookup of", host)
        return gethostbyname(host)

    return {
        (sock_cls, "connect"): guarded_connect,
        (sock_cls, "connect_ex"): guarded_connect_ex,
        (sock_cls, "sendto"): guarded_sendto,
        (socket, "create_connection"): guarded_create_connection,
        (socket, "getaddrinfo"): guarded_getaddrinfo,
        (socket, "gethostbyname"): guarded_gethostbyname,
    }


def _text(host: Any) -> str:
    return host.decode("ascii", errors="replace") if isinstance(host, bytes) else str(host)
