"""``plait send --server URL``: the same command against a running service. Posts the
message (the run is queued), follows the run's event stream (resuming with Last-Event-ID
if the connection drops) and prints what ``send`` prints: the run's messages, the run
with its failure reason, the approvals a waiting run waits for, or with ``--events`` the
same JSON lines. Flags that only a local run can honour (``--model``, ``--policy``,
``--db``) are refused. HTTP with the standard library only."""

from __future__ import annotations

import argparse
import json
import os
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

from plait.adapters.shapes import event_json
from plait.domain.errors import ConfigError, PlaitError
from plait.domain.runs import RunStatus
from plait.entrypoints.cli._commands import exit_for
from plait.entrypoints.cli._io import Out, read_message, read_output_schema, terminal_safe
from plait.entrypoints.cli._options import UsageError, budget
from plait.entrypoints.cli._render import message_text_of, plural, run_text_of

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
        except urllib.error.HTTPError as error:
            raise _error(error) from None
        except urllib.error.URLError as error:
            raise RemoteError(
                f"cannot reach {self.base}: {error.reason}", server=self.base
            ) from error

    def json(self, method: str, path: str, body: Any = None) -> Any:
        with self._request(method, path, body) as response:
            return json.loads(response.read())

    def events(self, run_id: str, last: int) -> Any:
        return self._request("GET", f"/v1/runs/{run_id}/events", Last_Event_ID=str(last))


def _error(error: urllib.error.HTTPError) -> RemoteError:
    try:
        err = json.loads(error.read())["error"]
        return RemoteError(
            f"{err['message']} ({err['code']})", status=error.code, remote_code=err["code"]
        )
    except (ValueError, KeyError, TypeError):
        return RemoteError(f"the service answered HTTP {error.code}", status=error.code)


def _follow(client: _Client, run_id: str, on_event: Callable[[str, Any], None]) -> dict[str, Any]:
    """Pass each event of the run to ``on_event``; return the run once it stops."""
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
                        tries = 0
                        if event == "run_finished":
                            return dict(data["run"])
                        if event == "error":
                            err = data["error"]
                            raise RemoteError(
                                f"{err['message']} ({err['code']})", remote_code=err["code"]
                            )
                        on_event(event, data)
                        event = "message"
        except (OSError, RemoteError):
            tries += 1
            if tries > 5:
                raise
            time.sleep(min(0.2 * 2**tries, 5.0))


_BUDGET_FIELDS = (
    "max_steps",
    "deadline_seconds",
    "max_model_calls",
    "max_total_tokens",
    "max_cost_usd",
    "tool_timeout_seconds",
    "tool_output_cap_bytes",
)
"""The budget fields of the API's message body (``BudgetIn``)."""


def _budget_body(args: argparse.Namespace) -> dict[str, Any]:
    """The budget flags as the API takes them (the limits send would set; none is left
    out, so the run has exactly the budget it would have had without --server)."""

    limits = budget(args)
    return {f: getattr(limits, f) for f in _BUDGET_FIELDS if getattr(limits, f) is not None}


_LOCAL_ONLY = {
    "model": "the service runs the model it was started with (PLAIT_MODEL where it runs)",
    "policy": "the service decides calls under its own policy (PLAIT_POLICY where it runs)",
    "db": "the service uses its own store",
}
"""Flags of ``send`` that do not apply to a server, and why (refused, not ignored)."""


def _refuse_local_flags(args: argparse.Namespace) -> None:
    for name, why in _LOCAL_ONLY.items():
        if getattr(args, name, None) is not None:
            raise UsageError(
                f"--{name} does not apply with --server: {why}; leave it out",
                command="plait send",
                flag=f"--{name}",
            )


def _waiting_lines(run_id: str, waiting: list[dict[str, Any]], server: str) -> list[str]:
    lines = [f"run {run_id} waits for {plural(len(waiting), 'decision')}:"]
    for request in waiting:
        lines.append(
            f"  {request['approval_id']}  {request['tool_name']}  call {request['call_id']}  why: "
            f"{request['reason']}"
        )
    lines.append(
        f"  decide in the console ({server}/console/approvals) or with POST "
        "/v1/approvals/ID/approve or /deny"
    )
    return lines


def _run_messages(client: _Client, session_id: str, run_id: str, after: int) -> list[Any]:
    """The run's messages, in order, from the session's messages after seq ``after`` (a
    page at a time: a long session's first page does not hold them)."""
    found: list[Any] = []
    while True:
        page = client.json("GET", f"/v1/sessions/{session_id}/messages?after={after}&limit=1000")
        found += [m for m in page["messages"] if m["run_id"] == run_id]
        if page["next_after"] is None:
            return found
        after = int(page["next_after"])


def send_remote(args: argparse.Namespace, out: Out) -> int:
    _refuse_local_flags(args)
    # A remote server's key, not this process's settings: the flag, else the environment.
    key = getattr(args, "api_key", None) or os.environ.get("PLAIT_API_KEY")
    if not key:
        raise ConfigError("--server needs an API key: --api-key KEY or PLAIT_API_KEY")
    client = _Client(args.server, key)
    text = read_message(args.text, args.file)
    body: dict[str, Any] = {"text": text, "budget": _budget_body(args)}
    if args.mcp or args.no_mcp:
        body["mcp_servers"] = list(dict.fromkeys(args.mcp or ()))
    schema = read_output_schema(args.output_schema)
    if schema is not None:
        body["output_schema"] = schema.schema()
    # The run's messages come after the session's last one now (the submission appends).
    before = int(client.json("GET", f"/v1/sessions/{args.session_id}")["version"])
    run = client.json("POST", f"/v1/sessions/{args.session_id}/messages", body)
    shown: set[str] = set()

    def show(message: dict[str, Any]) -> None:
        shown.add(message["message_id"])
        print(terminal_safe(message_text_of(message)), flush=True)

    def on_event(event: str, data: Any) -> None:
        if args.events:
            if event in ("message", "compaction"):
                Out.line(event_json(event, data["message"] if event == "message" else data))
            return
        if out.json:
            return
        if event == "message":
            if not shown:  # first the run's earlier ones no event carries: the user's message
                seq = data["message"]["seq"]
                for earlier in _run_messages(client, args.session_id, run["run_id"], before):
                    if earlier["seq"] < seq:
                        show(earlier)
            show(data["message"])
        elif event == "compaction" and data["phase"] != "started":
            print(terminal_safe(f"[compaction {data['phase']}] {data.get('detail') or ''}"))

    finished = _follow(client, run["run_id"], on_event)
    waiting: list[dict[str, Any]] = []
    if finished["status"] == RunStatus.AWAITING_APPROVAL.value:
        found = client.json("GET", f"/v1/sessions/{args.session_id}/approvals")["approvals"]
        waiting = [
            x for x in found if x["run_id"] == finished["run_id"] and x["status"] == "pending"
        ]
    code = exit_for(RunStatus(finished["status"]))
    if args.events:
        Out.line(event_json("run", finished | ({"waiting_for": waiting} if waiting else {})))
        return code
    added = _run_messages(client, args.session_id, run["run_id"], before)
    answers = [m.get("output") for m in added if m["kind"] == "assistant"]
    output = answers[-1] if answers else None
    texts = [message_text_of(m) for m in added if m["message_id"] not in shown]
    lines = [*texts, "", run_text_of(finished)] if texts or shown else [run_text_of(finished)]
    if waiting:
        lines.extend(_waiting_lines(finished["run_id"], waiting, client.base))
    result = finished | {"messages": added, "output": output, "waiting_for": waiting}
    out.emit(result, "\n".join(lines))
    return code
