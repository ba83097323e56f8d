"""How ``plait serve`` speaks HTTP: uvicorn's h11 protocol with a deadline on request
headers, so slow or silent clients cannot hold connections open for ever (slowloris).

uvicorn closes a connection that stays idle ``timeout_keep_alive`` seconds *after* a
response, but it has no deadline before the first request, and any byte that arrives
cancels its keep-alive timer: a client that connects and says nothing, or sends its
headers a byte at a time, keeps the connection (and its file descriptor) for ever. Here
a connection must deliver a complete request head within ``header_timeout`` seconds of
being opened, and each next request head within that long of the previous response
(the keep-alive timeout, shorter, still closes idle connections first). A request whose
head has arrived is not limited: a response may stream as long as it needs. The request
head's size stays bounded by h11 (16 KiB by default).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from uvicorn.protocols.http.h11_impl import H11Protocol

__all__ = ["HEADER_TIMEOUT_SECONDS", "KEEP_ALIVE_SECONDS", "HeaderDeadlineProtocol", "protocol"]

HEADER_TIMEOUT_SECONDS = 10.0
"""How long a connection may take to send a complete request head."""
KEEP_ALIVE_SECONDS = 5
"""How long an idle connection stays open after a response (uvicorn's default, set)."""

log = logging.getLogger("plait.http")


class HeaderDeadlineProtocol(H11Protocol):
    """h11 with a deadline on each request head (see the module's docstring)."""

    header_timeout: float = HEADER_TIMEOUT_SECONDS

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._head_deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def handle_events(self) -> None:
        cycle = self.cycle
        super().handle_events()
        if self.cycle is not cycle:  # a request head arrived: its cycle began
            self._disarm()

    def on_response_complete(self) -> None:
        # Armed first: a pipelined request already received is handled (and disarms it)
        # within the call below.
        self._arm()
        super().on_response_complete()

    def _arm(self) -> None:
        self._disarm()
        self._head_deadline = self.loop.call_later(self.header_timeout, self._head_too_slow)

    def _disarm(self) -> None:
        if self._head_deadline is not None:
            self._head_deadline.cancel()
            self._head_deadline = None

    def _head_too_slow(self) -> None:
        self._head_deadline = None
        if self.transport.is_closing():
            return
        if self.cycle is not None and not self.cycle.response_complete:
            return  # a request is being answered
        log.info(
            "closed a connection that sent no complete request head within %.1f s",
            self.header_timeout,
            extra={"client": f"{self.client[0]}:{self.client[1]}" if self.client else None},
        )
        self.transport.close()


def protocol(header_timeout: float = HEADER_TIMEOUT_SECONDS) -> type[HeaderDeadlineProtocol]:
    """The protocol class for uvicorn's ``http`` setting, with this deadline."""
    if not header_timeout > 0:
        raise ValueError(f"header_timeout must be positive: {header_timeout!r}")
    attrs = {"header_timeout": float(header_timeout)}
    return type("HeaderDeadlineProtocol", (HeaderDeadlineProtocol,), attrs)
