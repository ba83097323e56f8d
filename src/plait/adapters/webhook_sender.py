"""The HTTP client that sends webhook deliveries (httpx, one connection pool per worker).

A principal's endpoint (registered over HTTP by a tenant) may only reach public
addresses: its host is resolved when each delivery is sent, every address it resolves to
must be global (not loopback, private, link-local, shared, reserved or multicast), and
the request goes to the address that was checked (the ``Host`` header and, over HTTPS,
the TLS server name stay the URL's), so a name that resolves elsewhere a moment later
(DNS rebinding) cannot lead it inside the network. An operator's endpoints (the CLI's, an
admin's, the config's: no principal) are not restricted, nor any with
``private_networks=True`` (``PLAIT_WEBHOOK_PRIVATE_NETWORKS=allow``)."""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Mapping
from typing import Any

import httpx

__all__ = ["HttpxSender", "check_public"]

_Address = ipaddress.IPv4Address | ipaddress.IPv6Address


class HttpxSender:
    """POST with a total ``timeout``; no redirects followed (a redirect is a failure,
    like any status outside 2xx). Transport errors and refused destinations become
    ``OSError``."""

    def __init__(self, timeout: float = 10.0, *, private_networks: bool = False) -> None:
        self._client = httpx.AsyncClient(timeout=timeout, follow_redirects=False)
        self.private_networks = private_networks

    async def post(
        self,
        url: str,
        *,
        body: str,
        headers: Mapping[str, str],
        public_only: bool = False,
    ) -> int:
        sent_headers = dict(headers)
        extensions: dict[str, Any] = {}
        target: httpx.URL | str = url
        try:
            if public_only and not self.private_networks:
                parsed = httpx.URL(url)
                address = await check_public(parsed)
                target = parsed.copy_with(host=str(address))
                sent_headers["host"] = parsed.netloc.decode("ascii")
                if parsed.scheme == "https":
                    extensions["sni_hostname"] = parsed.host
            response = await self._client.post(
                target, content=body.encode(), headers=sent_headers, extensions=extensions
            )
        except (httpx.HTTPError, httpx.InvalidURL, httpx.StreamError) as exc:
            raise OSError(f"{type(exc).__name__}: {exc}") from exc
        return response.status_code

    async def close(self) -> None:
        await self._client.aclose()


async def check_public(url: httpx.URL) -> _Address:
    """The address to send to: the first ``url``'s host resolves to, once every one it
    resolves to is global; else a refusal naming the address (``OSError``)."""
    host = url.host
    port = url.port or (443 if url.scheme == "https" else 80)
    try:
        infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError as exc:
        raise OSError(f"cannot resolve {host!r}: {exc.strerror or exc}") from exc
    addresses = list(dict.fromkeys(ipaddress.ip_address(info[4][0]) for info in infos))
    if not addresses:
        raise OSError(f"cannot resolve {host!r}: no address")
    for address in addresses:
        mapped = getattr(address, "ipv4_mapped", None)
        if not address.is_global or (mapped is not None and not mapped.is_global):
            raise OSError(
                f"refused: {host!r} resolves to {address}, which is not a public address; a "
                "principal's webhook may only reach public addresses "
                "(PLAIT_WEBHOOK_PRIVATE_NETWORKS=allow lets them reach private networks)"
            )
    return addresses[0]
