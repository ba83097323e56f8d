"""``plait chat``: an interactive session with rich rendering and a spinner.

Each message is one run. Ctrl-C during a run cancels it (the cancellation is recorded and
no call is left unpaired); Ctrl-C or Ctrl-D at the prompt leaves.

With ``--json`` it is a line protocol for scripts: each line read from stdin is sent as a
message, and every saved message is printed as one JSON line ``{"event": "message", ...}``
followed by ``{"event": "run", ...}`` when the run ends (or ``{"event": "error", ...}``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
from typing import Any

from plait.application.events import MessageSaved, ModelCallStarted, RunEvent, ToolStarted
from plait.domain.errors import PlaitError
from plait.domain.runs import Budget, RunStatus
from plait.domain.session import StoredMessage

__all__ = ["run_chat"]


def _print_message(console: Any, sm: StoredMessage) -> None:
    from rich.markdown import Markdown

    m = sm.message
    if m.kind == "assistant":
        if m.text:
            console.print(Markdown(m.text))
        for c in m.tool_calls:
            args = json.dumps(c.arguments(), ensure_ascii=False)
            console.print(f"  [cyan]→ {c.name}[/] [dim]{args[:160]}[/]", highlight=False)
    elif m.kind == "tool_result":
        r = m.result
        ok = r.status.value == "succeeded"
        colour, mark = ("green", "✓") if ok else ("yellow", "✗")
        first = (r.reason or r.content).strip().splitlines()
        detail = first[0][:120] if first else ""
        console.print(f"  [{colour}]{mark} {m.tool_name} {r.status.value}[/] [dim]{detail}[/]")


def _json_chat(service: Any, session_id: str, budget: Budget) -> int:
    import sys

    from plait.adapters.cli._json import message_json, run_json

    def emit(data: dict[str, Any]) -> None:
        print(json.dumps(data, ensure_ascii=False), flush=True)

    emit({"event": "session", "session_id": session_id})
    for line in sys.stdin:
        text = line.rstrip("\n")
        if not text.strip():
            continue

        def observe(event: RunEvent) -> None:
            if isinstance(event, MessageSaved):
                emit({"event": "message", **message_json(event.stored)})

        try:
            result = asyncio.run(service.send(session_id, text, budget=budget, observer=observe))
        except PlaitError as e:
            emit({"event": "error", "error": e.to_dict()})
            continue
        emit({"event": "run", **run_json(result.run)})
    return 0


def run_chat(a: argparse.Namespace, budget: Budget) -> int:
    from plait.runtime import Runtime

    runtime = Runtime.open(db=getattr(a, "db", None), model=a.model)
    service = runtime.service

    async def start() -> str:
        if a.session_id:
            await service.store.get_session(a.session_id)
            return str(a.session_id)
        session = await service.create_session(workspace=a.workspace)
        return session.id

    try:
        service.model  # noqa: B018 - no model: fail before creating a session
        session_id = asyncio.run(start())
        if getattr(a, "json", False):
            return _json_chat(service, session_id, budget)
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
            with console.status("thinking…", spinner="dots") as status:

                def observe(event: RunEvent) -> None:
                    if isinstance(event, MessageSaved) and event.stored.message.kind != "user":
                        _print_message(console, event.stored)
                    elif isinstance(event, ModelCallStarted):
                        status.update("thinking…" if event.attempt == 1 else "correcting…")
                    elif isinstance(event, ToolStarted):
                        status.update(f"running {event.call.name}…")

                try:
                    result = asyncio.run(
                        service.send(session_id, text, budget=budget, observer=observe)
                    )
                except KeyboardInterrupt:
                    console.print("[yellow]run cancelled[/]")
                    continue
                except PlaitError as e:
                    console.print(f"[red]error:[/] {e.message}")
                    continue
            run = result.run
            if run.status is not RunStatus.COMPLETED:
                why = f": {run.error.message}" if run.error else ""
                console.print(f"[yellow]run {run.status.value}{why}[/]")
    finally:
        asyncio.run(runtime.close())
