"""``plait send``: one message, one run, shown live on a terminal."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from plait.adapters.shapes import event_json, run_json
from plait.domain.errors import ConfigError
from plait.entrypoints.cli._commands import exit_for, print_result
from plait.entrypoints.cli._io import Out, read_message, read_output_schema
from plait.entrypoints.cli._live import json_lines, terminal_progress
from plait.entrypoints.cli._options import budget

if TYPE_CHECKING:
    from plait.runtime import Runtime

__all__ = ["prepare_send", "send"]


def prepare_send(a: argparse.Namespace) -> None:
    """Read and check the message (and the budget) before anything is opened."""
    a.message = read_message(a.text, a.file)
    a.budget = budget(a)
    a.answer_schema = read_output_schema(a.output_schema)
    a.mcp_servers = None if not (a.mcp or a.no_mcp) else tuple(dict.fromkeys(a.mcp or ()))
    a.mcp_configs = None
    if a.mcp_servers is not None:
        # lazy: plait.runtime loads the application layer (~50 ms); --help does not need it
        from plait.runtime import configured_mcp

        configured = configured_mcp()
        for name in a.mcp_servers:
            if name not in configured:
                have = ", ".join(repr(k) for k in sorted(configured)) or "none"
                raise ConfigError(
                    f"--mcp {name!r}: no such MCP server in [mcp.servers] (configured: {have})",
                    server=name,
                )
        a.mcp_configs = {name: configured[name] for name in a.mcp_servers}


async def send(rt: Runtime, a: argparse.Namespace, out: Out) -> int:
    if a.events:
        result = await rt.service.send(
            a.session_id,
            a.message,
            budget=a.budget,
            observer=json_lines,
            output_type=a.answer_schema,
            mcp_servers=a.mcp_servers,
        )
        Out.line(event_json("run", run_json(result.run)))
        return exit_for(result.run.status)
    if out.json or not sys.stdout.isatty():
        result = await rt.service.send(
            a.session_id,
            a.message,
            budget=a.budget,
            output_type=a.answer_schema,
            mcp_servers=a.mcp_servers,
        )
        return print_result(out, result)
    # lazy: rich costs ~100 ms and only a terminal run needs it
    from rich.console import Console

    console = Console()
    with terminal_progress(console) as observe:
        result = await rt.service.send(
            a.session_id,
            a.message,
            budget=a.budget,
            observer=observe,
            on_text=observe.on_text,
            output_type=a.answer_schema,
            mcp_servers=a.mcp_servers,
        )
    return print_result(out, result, shown=True)
