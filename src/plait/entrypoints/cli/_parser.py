"""The argument parser of ``plait``: commands, options and their validation."""

from __future__ import annotations

import argparse
import math
from typing import NoReturn

from plait.domain.errors import ConfigError, ValidationError
from plait.domain.runs import Budget
from plait.entrypoints.cli.governance import policy_opt

__all__ = ["UsageError", "build_parser"]


class UsageError(ConfigError):
    """The command line itself is wrong (unknown option, missing argument, ...)."""

    code = "usage"


class _Parser(argparse.ArgumentParser):
    """Turns argparse's exit-on-error into a UsageError, so ``--json`` gets its error and
    the first line on stderr is the message, not the usage block."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message}", command=self.prog)


def _whole(text: str, *, least: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number, got {text!r}") from None
    if value < least:
        raise argparse.ArgumentTypeError(f"must be at least {least}, got {value}")
    return value


def positive_int(text: str) -> int:
    return _whole(text, least=1)


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number of seconds, got {text!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"must be more than 0 seconds, got {text}")
    return value


def _dollars(text: str) -> float:
    try:
        value = float(text.removeprefix("$"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an amount of US dollars, got {text!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"must be more than 0 dollars, got {text}")
    return value


def common(p: argparse.ArgumentParser, *, top: bool = False) -> None:
    # Sub-commands SUPPRESS their defaults so `plait --json history S` keeps --json.
    p.add_argument(
        "--json",
        action="store_true",
        default=False if top else argparse.SUPPRESS,
        help="print machine-readable JSON",
    )
    p.add_argument(
        "--db",
        default=argparse.SUPPRESS,
        help="store URL: sqlite:///PATH, postgresql://..., jsonl:///DIR or memory:// "
        "(default: $PLAIT_DB, "
        "else plait.db in $XDG_DATA_HOME/plait or ~/.local/share/plait)",
    )


def model_opt(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--model",
        default=None,
        help="model spec, e.g. scripted:PATH, for this run only (default: the session's "
        "model, else $PLAIT_MODEL, else plait.toml's model)",
    )


def _default(value: float | None) -> str:
    return " (default: no limit)" if value is None else f" (default: {value:g})"


def budget_opts(p: argparse.ArgumentParser) -> None:
    d = Budget()
    g = p.add_argument_group("budget (a run stops when it reaches one of these)")
    g.add_argument(
        "--max-steps",
        type=positive_int,
        default=d.max_steps,
        help="agent steps" + _default(d.max_steps),
    )
    g.add_argument(
        "--deadline",
        type=_seconds,
        default=d.deadline_seconds,
        help="seconds" + _default(d.deadline_seconds),
    )
    g.add_argument(
        "--max-model-calls",
        type=positive_int,
        default=d.max_model_calls,
        help="model calls" + _default(d.max_model_calls),
    )
    g.add_argument(
        "--max-tokens",
        type=positive_int,
        default=d.max_total_tokens,
        help="input + output tokens" + _default(d.max_total_tokens),
    )
    g.add_argument(
        "--max-cost",
        type=_dollars,
        default=d.max_cost_usd,
        metavar="USD",
        help="cost ceiling in US dollars, from the model's declared prices"
        + _default(d.max_cost_usd),
    )
    g.add_argument(
        "--tool-timeout",
        type=_seconds,
        default=d.tool_timeout_seconds,
        help="seconds per tool call" + _default(d.tool_timeout_seconds),
    )
    g.add_argument(
        "--output-cap",
        type=positive_int,
        default=d.tool_output_cap_bytes,
        help="bytes of a tool's output the model sees (the rest goes to an artifact)"
        + _default(d.tool_output_cap_bytes),
    )


_BUDGET_FLAGS = {
    "max_steps": "--max-steps",
    "deadline_seconds": "--deadline",
    "max_model_calls": "--max-model-calls",
    "max_total_tokens": "--max-tokens",
    "max_cost_usd": "--max-cost",
    "tool_timeout_seconds": "--tool-timeout",
    "tool_output_cap_bytes": "--output-cap",
}


def budget(a: argparse.Namespace) -> Budget:
    """The run's budget from the flags; a limit the domain refuses is reported under the
    flag's name."""
    try:
        return Budget(
            max_steps=a.max_steps,
            deadline_seconds=a.deadline,
            max_model_calls=a.max_model_calls,
            max_total_tokens=a.max_tokens,
            max_cost_usd=a.max_cost,
            tool_timeout_seconds=a.tool_timeout,
            tool_output_cap_bytes=a.output_cap,
        )
    except ValidationError as e:
        message = e.message
        for field, flag in _BUDGET_FLAGS.items():
            message = message.replace(f"budget {field}", flag)
        raise ValidationError(message, **e.details) from e


def _sessions(sub: argparse._SubParsersAction[_Parser]) -> None:
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
    from plait.entrypoints.cli.forks import register as register_forks

    register_forks(ssub, common)


def _send(sub: argparse._SubParsersAction[_Parser]) -> None:
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
    servers = send.add_mutually_exclusive_group()
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


def _runs(sub: argparse._SubParsersAction[_Parser]) -> None:
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
    parser = _Parser(prog="plait", description="plait: a durable agent backend (see README.md)")
    common(parser, top=True)
    sub = parser.add_subparsers(
        dest="command", required=True, metavar="COMMAND", parser_class=_Parser
    )
    _sessions(sub)
    _send(sub)
    hist = sub.add_parser("history", help="print a session's messages")
    hist.add_argument("session_id", metavar="SESSION")
    common(hist)
    _runs(sub)
    from plait.entrypoints.cli import service_cmds

    service_cmds.register(sub, common)
    from plait.entrypoints.cli.compaction import register as register_compaction

    register_compaction(sub, common, model_opt)
    from plait.entrypoints.cli.governance import register as register_governance

    register_governance(sub, common)
    from plait.entrypoints.cli.models import register as register_models

    register_models(sub, common)
    from plait.entrypoints.cli.retention import register as register_retention

    register_retention(sub, common)

    from plait.entrypoints.cli.mcp import register as register_mcp

    register_mcp(sub, common, policy_opt)

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
    model_opt(chat)
    policy_opt(chat)
    budget_opts(chat)
    common(chat)

    from plait.entrypoints.cli.init import register as register_init

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
