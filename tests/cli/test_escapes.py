"""Human-readable output neutralizes terminal control sequences that come from tool
output, file contents or model text (issue 24 item 5): a workspace file holding an OSC
title sequence or a clear-screen CSI is shown as visible escapes, not obeyed."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

from rich.console import Console

from plait.entrypoints.cli._io import terminal_safe
from plait.entrypoints.cli._live import print_message
from tests.cli.conftest import Plait, call, write_script

TITLE = "\x1b]0;owned\x07"
CLEAR = "\x1b[2J"


def test_terminal_safe_shows_controls_and_keeps_newlines_and_tabs() -> None:
    assert terminal_safe(f"a{TITLE}b{CLEAR}c") == "a\\x1b]0;owned\\x07b\\x1b[2Jc"
    assert terminal_safe("x\ty\nz\r\nw") == "x\ty\nz\nw"  # \t, \n kept; CRLF is a newline
    assert terminal_safe("paid\rfree") == "paid\\rfree"  # a lone CR cannot overwrite
    assert terminal_safe("ab\bc\x9b2J\x7f") == "ab\\x08c\\x9b2J\\x7f"  # BS, C1 CSI, DEL
    assert terminal_safe("plain — ünïcode ✓") == "plain — ünïcode ✓"


SCRIPT: dict[str, Any] = {
    "version": 1,
    "model": "cli-test",
    "assistant": [
        {"text": f"reading{CLEAR}", "tool_calls": [call("read_file", "c1", path="evil.txt")]},
        {"text": f"done {TITLE}"},
    ],
}


def test_send_and_history_never_print_control_sequences(
    plait: Plait, workspace: Path, tmp_path: Path
) -> None:
    (workspace / "evil.txt").write_text(f"before{TITLE}middle{CLEAR}after\n", encoding="utf-8")
    model = write_script(tmp_path, "evil", SCRIPT)
    sid = plait.new_session(workspace)
    sent = plait("send", sid, "read evil.txt", "--model", model)
    assert sent.code == 0, sent.err
    history = plait.ok("history", sid)
    for out in (sent.out, history.out):
        assert "\x1b" not in out and "\x07" not in out
        assert "before\\x1b]0;owned\\x07middle\\x1b[2Jafter" in out
    assert "done \\x1b]0;owned\\x07" in history.out


def test_live_rendering_never_prints_control_sequences(
    plait: Plait, workspace: Path, tmp_path: Path
) -> None:
    (workspace / "evil.txt").write_text(f"x{TITLE}{CLEAR}\n", encoding="utf-8")
    model = write_script(tmp_path, "evil", SCRIPT)
    sid = plait.new_session(workspace)
    plait.ok("send", sid, "read evil.txt", "--model", model)
    buffer = io.StringIO()
    console = Console(file=buffer, color_system=None, width=200)
    for m in _messages(plait, sid):
        print_message(console, m)
    shown = buffer.getvalue()
    assert "\x1b" not in shown and "\x07" not in shown
    assert "\\x1b[2J" in shown  # the model's text and the tool output, visibly


def _messages(plait: Plait, sid: str) -> list[Any]:
    import asyncio

    from plait.adapters.stores import open_store

    async def read() -> list[Any]:
        store = open_store(plait.db)
        try:
            return list(await store.read_messages(sid))
        finally:
            await store.close()

    return asyncio.run(read())
