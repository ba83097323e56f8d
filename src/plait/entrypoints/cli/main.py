"""The ``plait`` command line. Every command takes ``--json`` for scripting.

Exit status: 0 success, 1 a run ended otherwise than ``completed``, 2 an error (with one
line on stderr naming it, and ``{"error": ...}`` on stdout with ``--json``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import warnings
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TextIO

from plait._gc import long_lived
from plait.adapters.shapes import error_json, event_json
from plait.domain.errors import ConfigError, PlaitError
from plait.domain.record import record
from plait.entrypoints.cli import _commands as cmd
from plait.entrypoints.cli import _loop, service_cmds
from plait.entrypoints.cli._io import Out, check_argv, printable
from plait.entrypoints.cli._options import UsageError, budget
from plait.entrypoints.cli._parser import build_parser
from plait.entrypoints.cli._remembered import remember_model
from plait.entrypoints.cli._send import prepare_send, send
from plait.entrypoints.cli.compaction import COMMANDS as COMPACTION_COMMANDS
from plait.entrypoints.cli.forks import COMMANDS as FORK_COMMANDS
from plait.entrypoints.cli.governance import COMMANDS as GOVERNANCE_COMMANDS
from plait.entrypoints.cli.init import print_schemas, run_init
from plait.entrypoints.cli.mcp import COMMANDS as MCP_COMMANDS
from plait.entrypoints.cli.models import COMMANDS as MODEL_COMMANDS
from plait.entrypoints.cli.retention import COMMANDS as RETENTION_COMMANDS

if TYPE_CHECKING:
    from plait.runtime import Runtime

__all__ = ["build_parser", "main"]

EXIT_OK, EXIT_RUN_NOT_COMPLETED, EXIT_ERROR = cmd.EXIT_OK, cmd.EXIT_RUN_NOT_COMPLETED, 2

Mode = Literal["read", "write", "create"]
"""read: no model, no tools, the store must exist; write: the store must exist;
create: the store is created when missing."""


@record
class _Command:
    run: Callable[[Runtime, argparse.Namespace, Out], Awaitable[int]]
    mode: Mode
    prepare: Callable[[argparse.Namespace], None] | None = None


_COMMANDS: dict[tuple[str, ...], _Command] = {
    ("sessions", "new"): _Command(cmd.sessions_new, "create"),
    ("sessions", "list"): _Command(cmd.sessions_list, "read"),
    ("send",): _Command(send, "write", prepare_send),
    ("history",): _Command(cmd.history, "read"),
    ("runs", "show"): _Command(cmd.runs_show, "read"),
    ("runs", "list"): _Command(cmd.runs_list, "read"),
    ("runs", "cancel"): _Command(cmd.runs_cancel, "write"),
    ("runs", "recover"): _Command(cmd.runs_recover, "write"),
    ("runs", "resolve"): _Command(cmd.runs_resolve, "write"),
    ("runs", "resume"): _Command(cmd.runs_resume, "write"),
    ("artifacts", "show"): _Command(cmd.artifacts_show, "read"),
}


def resolve_workspace(given: str) -> str:
    path = Path(given).expanduser()
    if not path.is_dir():
        raise ConfigError(f"workspace {given!r} is not an existing directory", workspace=given)
    return str(path.resolve())


async def _run(command: _Command, args: argparse.Namespace, out: Out) -> int:
    # lazy: plait.runtime loads the application layer (~50 ms); --help does not need it
    from plait.runtime import Runtime

    db = getattr(args, "db", None)
    if command.mode == "read":
        runtime = Runtime.open(db=db, store_only=True)
    else:
        model = getattr(args, "model", None)
        policy = getattr(args, "policy", None)
        # Only commands that run the agent start the MCP servers (to offer their tools).
        runs_agent = command.run in (send, cmd.runs_recover, cmd.runs_resume)
        servers: dict[str, Any] | None = None if runs_agent else {}
        if command.run is send and args.mcp_configs is not None:
            servers = args.mcp_configs  # only the servers the run chose (send --mcp)
        runtime = Runtime.open(
            db=db,
            model=model,
            create=command.mode == "create",
            policy=policy,
            mcp_servers=servers,
        )
    try:
        return await command.run(runtime, args, out)
    finally:
        await runtime.close()


def _dispatch(args: argparse.Namespace, out: Out) -> int:
    sub = getattr(args, f"{args.command}_command", None)
    key: tuple[str, ...] = (args.command, sub) if sub else (args.command,)
    if args.command == "chat":
        # lazy: chat loads rich and prompt_toolkit (~200 ms); only chat needs them
        from plait.entrypoints.cli.chat import run_chat

        return run_chat(args, budget(args))
    if args.command == "demo":
        # lazy: the demo loads tempfile, shlex and importlib.resources; only demo needs them
        from plait.entrypoints.cli.demo import run_demo

        return run_demo(
            db=getattr(args, "db", None), clean=args.clean, as_json=out.json, model=args.model
        )
    if args.command == "schema":
        return print_schemas(args, out)
    if args.command == "init":
        return run_init(args, out)
    if args.command == "send" and getattr(args, "server", None):
        # lazy: remote loads httpx (~50 ms); only send --server needs it
        from plait.entrypoints.cli.remote import send_remote

        return send_remote(args, out)
    if key in FORK_COMMANDS:
        return FORK_COMMANDS[key](args, out)
    if key in service_cmds.COMMANDS:
        return service_cmds.COMMANDS[key](args, out)
    if key in COMPACTION_COMMANDS:
        return COMPACTION_COMMANDS[key](args, out)
    if key in GOVERNANCE_COMMANDS:
        return GOVERNANCE_COMMANDS[key](args, out)
    if args.command == "retention":
        return RETENTION_COMMANDS[key](args, out)
    if args.command in ("tools", "mcp"):
        return MCP_COMMANDS[key](args, out)
    if args.command == "models":
        return MODEL_COMMANDS[key](args, out)
    command = _COMMANDS[key]
    if command.prepare is not None:
        command.prepare(args)
    if key == ("send",):
        remember_model(args, session_id=args.session_id)
    elif key in (("runs", "resume"), ("runs", "recover")):
        remember_model(args, run_id=args.run_id)
    return _loop.run(_run(command, args, out))


def _warn(
    message: Warning | str,
    category: type[Warning],
    filename: str,
    lineno: int,
    file: TextIO | None = None,
    line: str | None = None,
) -> None:
    print(f"plait: warning: {message}", file=sys.stderr)


def _fail(error: PlaitError, *, as_json: bool, events: bool = False) -> int:
    if events:
        Out.line(event_json("error", error_json(error)))
    elif as_json:
        Out(True).emit(error_json(error), "")
    print(f"plait: error: {printable(error.message)}", file=sys.stderr)
    if isinstance(error, UsageError):
        command = error.details.get("command", "plait")
        print(f"plait: see '{command} --help' for how to call it", file=sys.stderr)
    return EXIT_ERROR


def _quiet_stdout() -> None:
    """stdout was closed by the reader (``plait ... | head -1``): stop writing to it, and
    do not let the interpreter's final flush complain either."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass
    finally:
        os.close(devnull)


def _reconfigure() -> None:
    # Anything echoed back (a path, an id) may hold undecodable bytes: never crash on it.
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            reconfigure(errors="backslashreplace")


def main(argv: Sequence[str] | None = None) -> int:
    try:
        return _main(list(sys.argv[1:] if argv is None else argv))
    except BrokenPipeError:
        _quiet_stdout()
        return EXIT_ERROR
    except KeyboardInterrupt:  # before the command started (parsing, opening)
        print("plait: interrupted", file=sys.stderr)
        return 130


def _print_version(*, as_json: bool) -> int:
    """``plait --version``: the version of the installed distribution (its metadata)."""
    # lazy: importlib.metadata reads the installed distribution, for --version only
    from importlib.metadata import PackageNotFoundError, version

    try:
        found = version("plait")
    except PackageNotFoundError:  # imported from a source tree nothing installed
        # lazy: only when no distribution is installed
        from plait import __version__ as found
    if as_json:
        print(json.dumps({"name": "plait", "version": found}))
    else:
        print(f"plait {found}")
    return EXIT_OK


def _main(argv: list[str]) -> int:
    warnings.showwarning = _warn
    _reconfigure()
    as_json = "--json" in argv
    if "--version" in argv and set(argv) <= {"--version", "--json"}:
        return _print_version(as_json=as_json)
    try:
        check_argv(argv)
        with long_lived():  # the parser and the command's modules are kept to the end
            args = build_parser().parse_args(argv)
    except UsageError as error:
        return _fail(error, as_json=as_json)
    out = Out(args.json)
    events = bool(getattr(args, "events", False))
    try:
        if getattr(args, "workspace", None) is not None:
            args.workspace = resolve_workspace(args.workspace)
        return _dispatch(args, out)
    except PlaitError as error:
        return _fail(error, as_json=out.json, events=events)
    except KeyboardInterrupt:
        print("plait: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
