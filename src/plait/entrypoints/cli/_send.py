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


def prepare_send(args: argparse.Namespace) -> None:
    """Read and check the message (and the budget) before anything is opened."""
    args.message = read_message(args.text, args.file)
    args.budget = budget(args)
    args.answer_schema = read_output_schema(args.output_schema)
    choose_mcp(args)


def choose_mcp(args: argparse.Namespace) -> None:
    """``args.mcp_servers`` (the names ``--mcp``/``--no-mcp`` chose, recorded with each
    run; ``None``: every configured server) and ``args.mcp_configs`` (their settings, for
    the runtime to start; ``None``: all), checked against ``[mcp.servers]``."""
    args.mcp_servers = (
        None if not (args.mcp or args.no_mcp) else tuple(dict.fromkeys(args.mcp or ()))
    )
    args.mcp_configs = None
    if args.mcp_servers is not None:
        # lazy: plait.runtime loads the application layer (~50 ms); --help does not need it
        from plait.runtime import configured_mcp

        configured = configured_mcp()
        for name in args.mcp_servers:
            if name not in configured:
                have = ", ".join(repr(k) for k in sorted(configured)) or "none"
                raise ConfigError(
                    f"--mcp {name!r}: no such MCP server in [mcp.servers] (configured: {have})",
                    server=name,
                )
        args.mcp_configs = {name: configured[name] for name in args.mcp_servers}


async def send(rt: Runtime, args: argparse.Namespace, out: Out) -> int:
    if args.events:
        result = await rt.service.send(
            args.session_id,
            args.message,
            budget=args.budget,
            observer=json_lines,
            output_type=args.answer_schema,
            mcp_servers=args.mcp_servers,
        )
        Out.line(event_json("run", run_json(result.run)))
        return exit_for(result.run.status)
    if out.json or not sys.stdout.isatty():
        result = await rt.service.send(
            args.session_id,
            args.message,
            budget=args.budget,
            output_type=args.answer_schema,
            mcp_servers=args.mcp_servers,
        )
        return print_result(out, result)
    # lazy: rich costs ~100 ms and only a terminal run needs it
    from rich.console import Console

    console = Console()
    with terminal_progress(console) as observe:
        result = await rt.service.send(
            args.session_id,
            args.message,
            budget=args.budget,
            observer=observe,
            on_text=observe.on_text,
            output_type=args.answer_schema,
            mcp_servers=args.mcp_servers,
        )
    return print_result(out, result, shown=True)
