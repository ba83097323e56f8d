"""A small SSE reader for the tests."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import httpx

__all__ = ["Frame", "read_events"]


@dataclass
class Frame:
    id: str | None
    event: str
    data: dict[str, Any]


def read_events(
    client: httpx.Client, run_id: str, *, last_event_id: str | None = None, stop_after: int = 0
) -> list[Frame]:
    """Read the run's stream until it ends (or ``stop_after`` frames, then disconnect)."""
    headers = {} if last_event_id is None else {"Last-Event-ID": last_event_id}
    frames: list[Frame] = []
    with client.stream("GET", f"/v1/runs/{run_id}/events", headers=headers) as r:
        assert r.status_code == 200, r.read()
        assert r.headers["content-type"].startswith("text/event-stream")
        fields: dict[str, str] = {}
        for line in r.iter_lines():
            if line.startswith(":"):
                continue
            if line == "":
                if "data" in fields:
                    frames.append(
                        Frame(fields.get("id"), fields.get("event", "message"),
                              json.loads(fields["data"]))
                    )  # fmt: skip
                    if stop_after and len(frames) >= stop_after:
                        break
                fields = {}
                continue
            name, _, value = line.partition(":")
            fields[name] = value[1:] if value.startswith(" ") else value
    return frames
