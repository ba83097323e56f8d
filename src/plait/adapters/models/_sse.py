"""Server-sent events, decoded from lines into JSON payloads. Pure."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

__all__ = ["SseDecoder", "aiter_events", "iter_events"]


@dataclass(slots=True)
class SseDecoder:
    """Feed lines (without their newline); get ``(event, data)`` when an event ends.
    ``data: [DONE]`` and comments are skipped."""

    event: str | None = None
    data: list[str] | None = None

    def line(self, line: str) -> tuple[str | None, Any] | None:
        line = line.rstrip("\r")
        if not line:
            return self._flush()
        if line.startswith(":"):
            return None
        field, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if field == "event":
            self.event = value
        elif field == "data":
            self.data = [*(self.data or []), value]
        return None

    def _flush(self) -> tuple[str | None, Any] | None:
        event, data = self.event, self.data
        self.event, self.data = None, None
        if data is None:
            return None
        text = "\n".join(data)
        if text.strip() == "[DONE]":
            return None
        try:
            return event, json.loads(text)
        except ValueError:
            return event, {"error": {"message": f"undecodable stream event: {text[:200]}"}}

    def close(self) -> tuple[str | None, Any] | None:
        return self._flush()


def iter_events(lines: Iterable[str]) -> Iterator[dict[str, Any]]:
    """JSON payloads of the events in ``lines`` (a trailing event without its blank line
    is still decoded)."""
    decoder = SseDecoder()
    for line in lines:
        got = decoder.line(line)
        if got is not None and isinstance(got[1], dict):
            yield got[1]
    got = decoder.close()
    if got is not None and isinstance(got[1], dict):
        yield got[1]


async def aiter_events(lines: AsyncIterator[str]) -> AsyncIterator[dict[str, Any]]:
    decoder = SseDecoder()
    async for line in lines:
        got = decoder.line(line)
        if got is not None and isinstance(got[1], dict):
            yield got[1]
    got = decoder.close()
    if got is not None and isinstance(got[1], dict):
        yield got[1]
