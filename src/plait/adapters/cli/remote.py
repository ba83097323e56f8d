"""``plait send --server URL``: the same command against a running service. Posts the
message (the run is queued), follows the run's event stream (resuming with Last-Event-ID
if the connection drops) and prints what ``send`` prints. Standard library only."""

from __future__ import annotations

import argparse
import json
import os
import time
import urllib.error
import urllib.request
from typing import Any

from plait.adapters.cli._io import Out, read_message, read_output_schema
from plait.domain.errors import ConfigError, PlaitError
from plait.domain.runs import RunStatus

__all__ = ["RemoteError", "send_remote"]


class RemoteError(PlaitError):
    """The service answered with an error (its code and message are in the details)."""

    code = "remote_error"


class _Client:
    def __init__(self, base: str, key: str) -> None:
        if not base.startswith(("http://", "https://")):
            raise ConfigError(f"--server must be an http(s) URL, got {base!r}", server=base)
        self.base = base.rstrip("/")
        self.key = key

    def _request(self, method: str, path: str, body: Any = None, **headers: str) -> Any:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.base + path, data=data, method=method)
        req.add_header("Authorization", f"Bearer {self.key}")
        if data is not None:
            req.add_header("Content-Type", "application/json")
        for name, value in headers.items():
            req.add_header(name.replace("_", "-"), value)
        try:
            return urllib.request.urlopen(req, timeout=60)
        except urllib.error.HTTPError as e:
            raise _error(e) from None
        except urllib.error.URLError as e:
            raise RemoteError(f"cannot reach {self.base}: {e.reason}", server=self.base) from e

    def json(self, method: str, path: str, body: Any = None) -> Any:
        with self._request(method, path, body) as r:
            return json.loads(r.read())

    def events(self, run_id: str, last: int) -> Any:
        return self._request("GET", f"/v1/runs/{run_id}/events", Last_Event_ID=str(last))


def _error(e: urllib.error.HTTPError) -> RemoteError:
    try:
        err = json.loads(e.read())["error"]
        return RemoteError(
            f"{err['message']} ({err['code']})", status=e.code, remote_code=err["code"]
        )
    except (ValueError, KeyError, TypeError):
        return RemoteError(f"the service answered HTTP {e.code}", status=e.code)


def _follow(client: _Client, run_id: str, out: Out) -> dict[str, Any]:
    """Print the run's messages as they are saved; return the finished run."""
    last, tries = 0, 0
    while True:
        try:
            with client.events(run_id, last) as stream:
                event, data_lines = "message", []
                for raw in stream:
                    line = raw.decode().rstrip("\r\n")
                    if line.startswith("id:"):
                        last = int(line[3:].strip())
                    elif line.startswith("event:"):
                        event = line[6:].strip()
                    elif line.startswith("data:"):
                        data_lines.append(line[5:].strip())
                    elif line == "" and data_lines:
                        data = json.loads("\n".join(data_lines))
                        data_lines = []
                        if event == "run_finished":
                            return dict(data["run"])
                        if event == "message" and not out.json:
                            m = data["message"]
                            print(f"[{m['kind']}] {m.get('text') or m.get('content') or ''}")
                        if event == "compaction" and not out.json and data["phase"] != "started":
                            print(f"[compaction {data['phase']}] {data.get('detail') or ''}")
        except (OSError, RemoteError):
            tries += 1
            if tries > 5:
                raise
            time.sleep(min(0.2 * 2**tries, 5.0))


_BUDGET_FIELDS = (
    "max_steps", "deadline_seconds", "max_model_calls", "max_total_tokens", "max_cost_usd",
    "tool_timeout_seconds", "tool_output_cap_bytes",
)  # fmt: skip
"""The budget fields of the API's message body (``BudgetIn``)."""


def _budget_body(a: argparse.Namespace) -> dict[str, Any]:
    """The budget flags as the API takes them (the limits send would set; none is left
    out, so the run has exactly the budget it would have had without --server)."""
    from plait.adapters.cli._parser import budget

    b = budget(a)
    return {f: getattr(b, f) for f in _BUDGET_FIELDS if getattr(b, f) is not None}


def send_remote(a: argparse.Namespace, out: Out) -> int:
    key = getattr(a, "api_key", None) or os.environ.get("PLAIT_API_KEY")
    if not key:
        raise ConfigError("--server needs an API key: --api-key KEY or PLAIT_API_KEY")
    client = _Client(a.server, key)
    text = read_message(a.text, a.file)
    body: dict[str, Any] = {"text": text, "budget": _budget_body(a)}
    schema = read_output_schema(a.output_schema)
    if schema is not None:
        body["output_schema"] = schema.schema()
    run = client.json("POST", f"/v1/sessions/{a.session_id}/messages", body)
    finished = _follow(client, run["run_id"], out)
    page = client.json("GET", f"/v1/sessions/{a.session_id}/messages?limit=1000")
    added = [m for m in page["messages"] if m["run_id"] == run["run_id"]]
    answers = [m.get("output") for m in added if m["kind"] == "assistant"]
    output = answers[-1] if answers else None
    shown = f"run {finished['run_id']}: {finished['status']}"
    out.emit(finished | {"messages": added, "output": output}, shown)
    return 0 if finished["status"] == RunStatus.COMPLETED.value else 1
