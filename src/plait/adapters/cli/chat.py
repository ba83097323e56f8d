"""``plait chat``: an interactive session with rich rendering and a spinner.

Each message is one run. Ctrl-C during a run cancels it (the cancellation is recorded and
no call is left unpaired); Ctrl-C or Ctrl-D at the prompt leaves.
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
        colour = "green" if r.status.value == "succeeded" else "yellow"
        first = (r.reason or r.content).strip().splitlines()
        detail = first[0][:120] if first else ""
        console.print(f"  [{colour}]✓ {m.tool_name} {r.status.value}[/] [dim]{detail}[/]")


def run_chat(a: argparse.Namespace, budget: Budget) -> int:
    from rich.console import Console

    from plait.runtime import Runtime

    console = Console()
    runtime = Runtime.open(db=getattr(a, "db", None), model=a.model)
    service = runtime.service

    async def start() -> str:
        if a.session_id:
            await service.store.get_session(a.session_id)
            return str(a.session_id)
        session = await service.create_session(workspace=a.workspace)
        return session.id

    try:
        session_id = asyncio.run(start())
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
