"""On a terminal, streamed text shows in the spinner line while the model writes."""

from __future__ import annotations

import io

from rich.console import Console

from plait.entrypoints.cli._live import _Progress, terminal_progress


class _Status:
    def __init__(self) -> None:
        self.shown: list[str] = []

    def update(self, text: str) -> None:
        self.shown.append(text)


def test_streamed_text_updates_the_status_line() -> None:
    status = _Status()
    progress = _Progress(Console(file=io.StringIO()), status)
    progress.on_text("Looking at [the]")
    progress.on_text(" config\nfile")
    assert status.shown[-1] == "[dim]Looking at \\[the] config file[/]"
    progress.on_text("x" * 300)
    assert len(status.shown[-1]) < 120


def test_terminal_progress_yields_an_observer_with_a_text_sink() -> None:
    with terminal_progress(Console(file=io.StringIO())) as observe:
        observe.on_text("hello")
