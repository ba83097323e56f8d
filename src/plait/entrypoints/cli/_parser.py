"""The argument parser of ``plait``: every command and its options (the options several
commands share are in :mod:`plait.entrypoints.cli._options`)."""

from __future__ import annotations

import argparse

from plait.entrypoints.cli import (
    compaction,
    forks,
    governance,
    mcp,
    models,
    retention,
    service_cmds,
)
from plait.entrypoints.cli._options import (
    Parser,
    budget_opts,
    common,
    model_opt,
    policy_opt,
    positive_int,
)
from plait.entrypoints.cli.init import register as register_init

__all__ = ["build_parser"]


def _sessions(sub: argparse._SubParsersAction[Parser]) -> None:
    sessions = sub.add_parser("sessions", help="create and list sessions")
    ssub = sessions.add_subparsers(dest="sessions_command", required=True, metavar="ACTION")
    new = ssub.add_parser("new", help="create a session")
    new.add_argument(
        "--workspace",
        default=".",
        help="directory the tools may use (must exist; default: the current directory)",
    )
    new.add_argument("--title")
    new.add_argument(
        "--model",
        default=None,
        help="model spec the session's runs use when they name none (default: the one "
        "its first send runs with)",
    )
    common(new)
    lst = ssub.add_parser("list", help="list sessions, newest first")
    lst.add_argument("--limit", type=positive_int, default=50)
    common(lst)
    forks.register(ssub, common)


def _send(sub: argparse._SubParsersAction[Parser]) -> None:
    send = sub.add_parser(
        "send",
        help="send a message and run until the run ends",
        description="Send a message and run until the run ends. The message is TEXT, the "
        "contents of --file PATH, or standard input (TEXT '-', or no TEXT with stdin not "
        "a terminal).",
    )
    send.add_argument("session_id", metavar="SESSION")
    send.add_argument("text", metavar="TEXT", nargs="?", help="the message, or - for stdin")
    send.add_argument("--file", metavar="PATH", help="read the message from this file")
    send.add_argument(
        "--events",
        action="store_true",
        help="print each saved message as a JSON line as it happens, then the run "
        "(the line protocol of chat --json)",
    )
    send.add_argument(
        "--server", metavar="URL", help="send through a running `plait serve` (the run is queued)"
    )
    send.add_argument("--api-key", help="bearer key for --server (default: $PLAIT_API_KEY)")
    mcp_opts(send)
    send.add_argument(
        "--output-schema",
        metavar="FILE",
        help="a JSON Schema file: the final answer must be JSON matching it (a typed answer; "
        "--json prints its value as `output`)",
    )
    model_opt(send)
    policy_opt(send)
    budget_opts(send)
    common(send)


def mcp_opts(parser: Parser) -> None:
    """``--mcp NAME`` (repeatable) / ``--no-mcp``: the MCP servers whose tools a run gets."""
    servers = parser.add_mutually_exclusive_group()
    servers.add_argument(
        "--mcp",
        metavar="NAME",
        action="append",
        help="offer only this MCP server's tools (a name from [mcp.servers]; repeat for "
        "more); recorded with the run, which recovery continues with the same servers",
    )
    servers.add_argument(
        "--no-mcp", action="store_true", help="offer no MCP server's tools to this run"
    )


def _runs(sub: argparse._SubParsersAction[Parser]) -> None:
    runs = sub.add_parser("runs", help="inspect and control runs")
    rsub = runs.add_subparsers(dest="runs_command", required=True, metavar="ACTION")
    show = rsub.add_parser("show", help="show a run, its usage and its tool executions")
    show.add_argument("run_id", metavar="RUN")
    common(show)
    rlist = rsub.add_parser("list", help="list runs, newest first")
    rlist.add_argument("--session", dest="session_id")
    common(rlist)
    cancel = rsub.add_parser("cancel", help="ask a run (in any process) to stop")
    cancel.add_argument("run_id", metavar="RUN")
    cancel.add_argument(
        "--force",
        action="store_true",
        help="end a running run now although its lease has not expired (its process is "
        "gone; checked by PID when it ran on this host)",
    )
    common(cancel)
    recover = rsub.add_parser("recover", help="take over runs whose process died and continue them")
    recover.add_argument("--run", dest="run_id", help="only this run (default: every stale run)")
    recover.add_argument(
        "--force",
        action="store_true",
        help="with --run: take the run over although its lease has not expired (its process "
        "is gone; checked by PID when it ran on this host)",
    )
    model_opt(recover)
    policy_opt(recover)
    common(recover)
    resolve = rsub.add_parser(
        "resolve", help="record what a person verified about a call whose outcome is unknown"
    )
    resolve.add_argument("run_id", metavar="RUN")
    resolve.add_argument("--call", dest="call_id", required=True, metavar="CALL")
    resolve.add_argument("--status", required=True, choices=["succeeded", "failed"])
    resolve.add_argument("--note", required=True, help="what was verified")
    resolve.add_argument("--by", default="user", help="who verified it (default: user)")
    resolve.add_argument(
        "--queue",
        action="store_true",
        help="once no call is unknown, put the run back in the queue for a worker "
        "(`plait worker`, `plait serve`) instead of `plait runs resume`",
    )
    common(resolve)
    resume = rsub.add_parser(
        "resume",
        help="continue a run once its unknown calls are resolved (or a queued run no worker took)",
    )
    resume.add_argument("run_id", metavar="RUN")
    resume.add_argument(
        "--queue",
        action="store_true",
        help="put the run back in the queue for a worker (`plait worker`, `plait serve`) "
        "instead of continuing it here; refused on a store no worker can serve (JSONL)",
    )
    model_opt(resume)
    policy_opt(resume)
    common(resume)


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="plait", description="plait: a durable agent backend (see README.md)")
    common(parser, top=True)
    parser.add_argument(
        "--version", action="store_true", help="print plait's version and exit (with --json: JSON)"
    )
    sub = parser.add_subparsers(
        dest="command", required=True, metavar="COMMAND", parser_class=Parser
    )
    _sessions(sub)
    _send(sub)
    hist = sub.add_parser("history", help="print a session's messages")
    hist.add_argument("session_id", metavar="SESSION")
    common(hist)
    _runs(sub)
    service_cmds.register(sub, common)
    compaction.register(sub, common, model_opt)
    governance.register(sub, common)
    models.register(sub, common)
    retention.register(sub, common)
    mcp.register(sub, common, policy_opt)

    arts = sub.add_parser("artifacts", help="read stored artifacts (whole large tool outputs)")
    asub = arts.add_subparsers(dest="artifacts_command", required=True, metavar="ACTION")
    ashow = asub.add_parser("show", help="print an artifact's bytes (or, with --json, its text)")
    ashow.add_argument("artifact_id", metavar="ARTIFACT")
    ashow.add_argument("--output", "-o", help="write the bytes to this file instead")
    common(ashow)

    chat = sub.add_parser("chat", help="talk to the agent interactively")
    chat.add_argument("--session", dest="session_id", help="continue this session")
    chat.add_argument(
        "--workspace",
        default=".",
        help="workspace of a new session (must exist; default: the current directory)",
    )
    mcp_opts(chat)
    model_opt(chat)
    policy_opt(chat)
    budget_opts(chat)
    common(chat)

    register_init(sub, common)
    schema = sub.add_parser(
        "schema",
        help="print the JSON Schemas of the published shapes (those of the OpenAPI document)",
    )
    schema.add_argument("name", metavar="NAME", nargs="?", help="only this one, e.g. RunOut")
    common(schema)

    demo = sub.add_parser("demo", help="run the built-in example end to end (no network)")
    demo.add_argument(
        "--clean", action="store_true", help="remove the temporary workspace and store afterwards"
    )
    demo.add_argument(
        "--model",
        metavar="SPEC",
        help="run the same scenario with this model instead of the scripted one "
        "(e.g. anthropic:claude-haiku-4-5; needs its API key)",
    )
    common(demo)
    return parser
