"""``plait chat``: an interactive session with rich rendering and a spinner.

Each message is one run. Ctrl-C during a run cancels it (the cancellation is recorded and
no call is left unpaired); Ctrl-C or Ctrl-D at the prompt leaves.

With ``--json`` it is a line protocol for scripts: the first line printed is
``{"event": "session", "session_id": ...}``; then each line read from stdin is sent as a
message, every saved message is printed as one JSON line ``{"event": "message", ...}``,
followed by ``{"event": "run", ...}`` when the run ends, or ``{"event": "error", "error":
{...}}`` when the line could not be sent (e.g. it is not UTF-8); the chat goes on.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import TYPE_CHECKING

from plait.adapters.cli._io import Out, decode_utf8
from plait.adapters.cli._live import json_lines, terminal_progress
from plait.adapters.shapes import error_json, event_json, run_json
from plait.domain.errors import PlaitError
from plait.domain.runs import Budget, RunStatus

if TYPE_CHECKING:
    from plait.application.service import AgentService

__all__ = ["run_chat"]


def _json_chat(service: AgentService, session_id: str, budget: Budget) -> int:
    Out.line(event_json("session", {"session_id": session_id}))
    for number, raw in enumerate(sys.stdin.buffer, 1):
        try:
            text = decode_utf8(raw, f"input line {number}").rstrip("\r\n")
            if not text.strip():
                continue
            result = asyncio.run(service.send(session_id, text, budget=budget, observer=json_lines))
        except PlaitError as e:
            Out.line(event_json("error", error_json(e)))
            continue
        Out.line(event_json("run", run_json(result.run)))
    return 0


def _interactive(service: AgentService, session_id: str, budget: Budget) -> int:
    from rich.console import Console

    console = Console()
    console.print(
        f"[bold]plait chat[/] session [cyan]{session_id}[/], model {service.model.name}. "
        "Ctrl-C cancels a run; Ctrl-D leaves."
    )
    while True:
        try:
            text = console.input("[bold green]you> [/]")
        except (EOFError, KeyboardInterrupt):
            console.print()
            return 0
        if not text.strip():
            continue
        if text.strip() in {"/exit", "/quit"}:
            return 0
        try:
            with terminal_progress(console) as observe:
                result = asyncio.run(
                    service.send(
                        session_id, text, budget=budget, observer=observe, on_text=observe.on_text
                    )
                )
        except KeyboardInterrupt:
            console.print("[yellow]run cancelled[/]")
            continue
        except PlaitError as e:
            console.print(f"[red]error:[/] {e.message}", highlight=False)
            continue
        run = result.run
        if run.status is not RunStatus.COMPLETED:
            why = f": {run.error.message}" if run.error else ""
            console.print(f"[yellow]run {run.status.value}{why}[/]", highlight=False)


def run_chat(a: argparse.Namespace, budget: Budget) -> int:
    from plait.runtime import Runtime

    runtime = Runtime.open(db=getattr(a, "db", None), model=a.model, policy=a.policy)
    service = runtime.service

    async def start() -> str:
        if a.session_id:
            return (await runtime.queries.get_session(a.session_id)).id
        return (await service.create_session(workspace=a.workspace)).id

    try:
        service.check_can_run(budget)  # no model, no prices for --max-cost: fail first
        session_id = asyncio.run(start())
        if getattr(a, "json", False):
            return _json_chat(service, session_id, budget)
        return _interactive(service, session_id, budget)
    finally:
        asyncio.run(runtime.close())
