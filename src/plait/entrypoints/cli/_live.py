"""A run shown as it happens: on a terminal each saved message and a spinner while the
model or a tool works (``send``, ``chat``); as JSON lines for scripts (``send --events``,
``chat --json``)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from plait.adapters.shapes import compaction_event_json, event_json, message_json
from plait.application.events import (
    CompactionEvent,
    MessageSaved,
    ModelCallStarted,
    RunEvent,
    ToolStarted,
)
from plait.domain.session import StoredMessage
from plait.entrypoints.cli._io import Out, terminal_safe

__all__ = ["json_lines", "print_compaction", "print_message", "short_args", "terminal_progress"]

_ARGS_SHOWN = 160


def short_args(arguments: dict[str, Any], limit: int = _ARGS_SHOWN) -> str:
    text = terminal_safe(json.dumps(arguments, ensure_ascii=False))
    return text if len(text) <= limit else text[: limit - 1] + "…"


def print_message(console: Any, sm: StoredMessage) -> None:
    """An assistant message (markdown and its calls) or a tool result (status, first line)."""
    # lazy: rich costs ~100 ms and only a terminal run needs it
    from rich.markdown import Markdown
    from rich.markup import escape

    message = sm.message
    if message.kind == "assistant":
        if message.text:
            console.print(Markdown(terminal_safe(message.text)))
        for call in message.tool_calls:
            args = escape(short_args(call.arguments()))
            name = escape(terminal_safe(call.name))
            console.print(f"  [cyan]→ {name}[/] [dim]{args}[/]", highlight=False)
    elif message.kind == "tool_result":
        result = message.result
        ok = result.status.value == "succeeded"
        colour, mark = ("green", "✓") if ok else ("yellow", "✗")
        first = terminal_safe(result.reason or result.content).strip().splitlines()
        detail = escape(first[0][:120]) if first else ""
        console.print(
            f"  [{colour}]{mark} {escape(message.tool_name)} {result.status.value}[/] "
            f"[dim]{detail}[/]",
            highlight=False,
        )


class _Progress:
    """Prints each message the run saves (not the user's own) and keeps a spinner saying
    what the run waits for; while the model streams, the spinner shows the text so far
    (display only: the saved message is printed whole when it is stored)."""

    def __init__(self, console: Any, status: Any) -> None:
        self._console = console
        self._status = status
        self._streamed = ""

    def __call__(self, event: RunEvent) -> None:
        if isinstance(event, MessageSaved) and event.stored.message.kind != "user":
            self._streamed = ""
            print_message(self._console, event.stored)
            self._status.update("thinking…")
        elif isinstance(event, ModelCallStarted):
            self._streamed = ""
            self._status.update("thinking…" if event.attempt == 1 else "correcting…")
        elif isinstance(event, ToolStarted):
            self._status.update(f"running {event.call.name}…")
        elif isinstance(event, CompactionEvent):
            if event.phase == "started":
                self._status.update(f"compacting the context ({event.trigger})…")
            else:
                print_compaction(self._console, compaction_event_json(event))

    def on_text(self, delta: str) -> None:
        # lazy: rich costs ~100 ms and only a terminal run needs it
        from rich.markup import escape

        self._streamed += delta
        tail = terminal_safe(" ".join(self._streamed.split())[-100:])
        self._status.update(f"[dim]{escape(tail)}[/]")


@contextmanager
def terminal_progress(console: Any) -> Iterator[_Progress]:
    """An observer for a run on a terminal; pass its ``on_text`` to stream the model's
    text into the spinner line."""
    with console.status("thinking…", spinner="dots") as status:
        yield _Progress(console, status)


def print_compaction(console: Any, data: dict[str, Any]) -> None:
    """One line for a compaction that ended (the shape of ``compaction_event_json``)."""
    # lazy: rich costs ~100 ms and only a terminal run needs it
    from rich.markup import escape

    colour = "green" if data["phase"] == "activated" else "yellow"
    detail = escape(terminal_safe(str(data.get("detail") or "")))
    console.print(
        f"  [{colour}]⇣ compaction {data['phase']}[/] [dim]({data['trigger']}, step "
        f"{data['step']}) {detail}[/]",
        highlight=False,
    )


def json_lines(event: RunEvent) -> None:
    """Observer printing ``{"event": "message", ...}`` for each saved message and
    ``{"event": "compaction", ...}`` for each automatic compaction."""
    if isinstance(event, MessageSaved):
        Out.line(event_json("message", message_json(event.stored)))
    elif isinstance(event, CompactionEvent):
        Out.line(event_json("compaction", compaction_event_json(event)))
