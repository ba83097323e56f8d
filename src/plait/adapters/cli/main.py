"""The ``plait`` command line. Every command takes ``--json`` for scripting."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import warnings
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TextIO

from plait.adapters.cli import service_cmds
from plait.adapters.cli._json import execution_json, message_json, run_json, session_json
from plait.adapters.cli._render import message_text, run_text
from plait.adapters.cli.compaction import COMMANDS as COMPACTION_COMMANDS
from plait.adapters.cli.compaction import history_summaries
from plait.adapters.cli.compaction import register as register_compaction
from plait.adapters.cli.forks import COMMANDS as FORK_COMMANDS
from plait.adapters.cli.forks import branch_lines, workspace_json
from plait.adapters.cli.forks import register as register_forks
from plait.adapters.cli.governance import COMMANDS as GOVERNANCE_COMMANDS
from plait.adapters.cli.governance import register as register_governance
from plait.domain.errors import ConfigError, PlaitError, ValidationError
from plait.domain.runs import Budget, RunStatus

if TYPE_CHECKING:
    from plait.application.service import AgentService, RunResult
    from plait.domain.messages import ArtifactRef

__all__ = ["main"]

EXIT_OK, EXIT_RUN_NOT_COMPLETED, EXIT_ERROR = 0, 1, 2


class _Out:
    def __init__(self, as_json: bool) -> None:
        self.json = as_json

    def emit(self, data: Any, text: str | Callable[[], str]) -> None:
        if self.json:
            print(json.dumps(data, ensure_ascii=False, indent=2))
        else:
            print(text if isinstance(text, str) else text())


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


class UsageError(ConfigError):
    """The command line itself is wrong (unknown option, missing argument, ...)."""

    code = "usage"


class _Parser(argparse.ArgumentParser):
    """Turns argparse's exit-on-error into a UsageError, so ``--json`` gets its error."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{self.prog}: {message}", usage=self.format_usage().strip())


def _common(p: argparse.ArgumentParser, *, top: bool = False) -> None:
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
        help="store URL: sqlite:///PATH, jsonl:///DIR or memory:// "
        "(default: $PLAIT_DB, else plait.db in $XDG_DATA_HOME/plait or ~/.local/share/plait)",
    )


def _model_opt(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--model",
        default=None,
        help="model spec, e.g. scripted:PATH (default: $PLAIT_MODEL)",
    )


def _budget_opts(p: argparse.ArgumentParser) -> None:
    d = Budget()
    g = p.add_argument_group("budget")
    g.add_argument("--max-steps", type=int, default=d.max_steps)
    g.add_argument("--deadline", type=float, default=d.deadline_seconds, help="seconds")
    g.add_argument("--max-model-calls", type=int, default=d.max_model_calls)
    g.add_argument("--max-tokens", type=int, default=d.max_total_tokens)
    g.add_argument("--tool-timeout", type=float, default=d.tool_timeout_seconds, help="seconds")
    g.add_argument("--output-cap", type=int, default=d.tool_output_cap_bytes, help="bytes")


_BUDGET_FLAGS = {
    "max_steps": "--max-steps",
    "deadline_seconds": "--deadline",
    "max_model_calls": "--max-model-calls",
    "max_total_tokens": "--max-tokens",
    "tool_timeout_seconds": "--tool-timeout",
    "tool_output_cap_bytes": "--output-cap",
}


def _budget(a: argparse.Namespace) -> Budget:
    try:
        return Budget(
            max_steps=a.max_steps,
            deadline_seconds=a.deadline,
            max_model_calls=a.max_model_calls,
            max_total_tokens=a.max_tokens,
            tool_timeout_seconds=a.tool_timeout,
            tool_output_cap_bytes=a.output_cap,
        )
    except ValidationError as e:
        message = e.message
        for field, flag in _BUDGET_FLAGS.items():
            message = message.replace(f"budget {field}", flag)
        raise ValidationError(message, **e.details) from e


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="plait", description="plait: a durable agent backend (see README.md)")
    _common(parser, top=True)
    sub = parser.add_subparsers(
        dest="command", required=True, metavar="COMMAND", parser_class=_Parser
    )

    sessions = sub.add_parser("sessions", help="create and list sessions")
    ssub = sessions.add_subparsers(dest="sessions_command", required=True, metavar="ACTION")
    new = ssub.add_parser("new", help="create a session")
    new.add_argument("--workspace", help="directory the tools may use (must exist)")
    new.add_argument("--title")
    _common(new)
    lst = ssub.add_parser("list", help="list sessions, newest first")
    lst.add_argument("--limit", type=_positive_int, default=50)
    _common(lst)
    register_forks(ssub, _common)

    send = sub.add_parser("send", help="send a message and run until the run ends")
    send.add_argument("session_id", metavar="SESSION")
    send.add_argument("text", metavar="TEXT")
    _model_opt(send)
    _budget_opts(send)
    _common(send)

    hist = sub.add_parser("history", help="print a session's messages")
    hist.add_argument("session_id", metavar="SESSION")
    _common(hist)

    register_compaction(sub, _common, _model_opt)

    runs = sub.add_parser("runs", help="inspect and control runs")
    rsub = runs.add_subparsers(dest="runs_command", required=True, metavar="ACTION")
    show = rsub.add_parser("show", help="show a run, its usage and its tool executions")
    show.add_argument("run_id", metavar="RUN")
    _common(show)
    rlist = rsub.add_parser("list", help="list runs, newest first")
    rlist.add_argument("--session", dest="session_id")
    _common(rlist)
    cancel = rsub.add_parser("cancel", help="ask a run (in any process) to stop")
    cancel.add_argument("run_id", metavar="RUN")
    _common(cancel)
    recover = rsub.add_parser("recover", help="take over runs whose process died and continue them")
    recover.add_argument("--run", dest="run_id", help="only this run (default: every stale run)")
    _model_opt(recover)
    _common(recover)
    resolve = rsub.add_parser(
        "resolve", help="record what a person verified about a call whose outcome is unknown"
    )
    resolve.add_argument("run_id", metavar="RUN")
    resolve.add_argument("--call", dest="call_id", required=True, metavar="CALL")
    resolve.add_argument("--status", required=True, choices=["succeeded", "failed"])
    resolve.add_argument("--note", required=True, help="what was verified")
    resolve.add_argument("--by", default="user", help="who verified it (default: user)")
    _common(resolve)
    resume = rsub.add_parser("resume", help="continue a run once its unknown calls are resolved")
    resume.add_argument("run_id", metavar="RUN")
    _model_opt(resume)
    _common(resume)

    arts = sub.add_parser("artifacts", help="read stored artifacts (whole large tool outputs)")
    asub = arts.add_subparsers(
        dest="artifacts_command", required=True, metavar="ACTION", parser_class=_Parser
    )
    ashow = asub.add_parser("show", help="print an artifact's bytes (or, with --json, its text)")
    ashow.add_argument("artifact_id", metavar="ARTIFACT")
    ashow.add_argument("--output", "-o", help="write the bytes to this file instead")
    _common(ashow)

    chat = sub.add_parser("chat", help="talk to the agent interactively")
    chat.add_argument("--session", dest="session_id", help="continue this session")
    chat.add_argument("--workspace", default=".", help="workspace of a new session")
    _model_opt(chat)
    _budget_opts(chat)
    _common(chat)

    demo = sub.add_parser("demo", help="run the built-in example end to end (no network)")
    demo.add_argument(
        "--clean", action="store_true", help="remove the temporary workspace and store afterwards"
    )
    _common(demo)

    register_governance(sub, _common)
    service_cmds.register(sub, _common)
    return parser


def _db(a: argparse.Namespace) -> str | None:
    return getattr(a, "db", None)


def _open_store(a: argparse.Namespace) -> Any:
    from plait.adapters.stores import open_store
    from plait.runtime import default_db_url

    return open_store(_db(a) or default_db_url())


async def _with_store(a: argparse.Namespace, fn: Callable[[Any], Awaitable[int]]) -> int:
    store = _open_store(a)
    try:
        return await fn(store)
    finally:
        await store.close()


# --- commands --------------------------------------------------------------------------------


def resolve_workspace(given: str) -> str:
    path = Path(given).expanduser()
    if not path.is_dir():
        raise ConfigError(f"workspace {given!r} is not an existing directory", workspace=given)
    return str(path.resolve())


async def _sessions_new(a: argparse.Namespace, out: _Out) -> int:
    from plait.adapters.system import RandomIds, SystemClock
    from plait.domain.session import Session

    workspace = a.workspace

    async def run(store: Any) -> int:
        session = Session(
            id=RandomIds().new("ses"),
            created_at=SystemClock().now(),
            workspace=workspace,
            title=a.title,
        )
        await store.create_session(session)
        out.emit(session_json(session), session.id)
        return EXIT_OK

    return await _with_store(a, run)


async def _sessions_list(a: argparse.Namespace, out: _Out) -> int:
    async def run(store: Any) -> int:
        sessions = await store.list_sessions(limit=a.limit)
        out.emit(
            [session_json(s) for s in sessions],
            lambda: (
                "\n".join(
                    f"{s.id}  v{s.version}  {s.workspace or '-'}"
                    + (f"  (run {s.active_run_id} active)" if s.active_run_id else "")
                    for s in sessions
                )
                or "no sessions"
            ),
        )
        return EXIT_OK

    return await _with_store(a, run)


async def _history(a: argparse.Namespace, out: _Out) -> int:
    async def run(store: Any) -> int:
        session = await store.get_session(a.session_id)
        messages = await store.read_messages(a.session_id)
        fork = await store.get_fork_record(session.id) if session.fork_origin else None
        head = branch_lines(session, fork)
        data: dict[str, Any] = {"session_id": a.session_id}
        if session.fork_origin is not None:  # a branch says what it is bound to
            data["workspace"] = workspace_json(session, fork)
        extra, tail = await history_summaries(store, session.id)
        out.emit(
            data | {"messages": [message_json(m) for m in messages]} | extra,
            lambda: (
                "\n".join([*head, *(message_text(m) for m in messages), *tail]) or "no messages yet"
            ),
        )
        return EXIT_OK

    return await _with_store(a, run)


async def _runs_show(a: argparse.Namespace, out: _Out) -> int:
    async def run(store: Any) -> int:
        r = await store.get_run(a.run_id)
        executions = await store.get_executions(a.run_id)
        data = run_json(r) | {"executions": [execution_json(e) for e in executions]}

        def text() -> str:
            lines = [run_text(r)]
            for e in executions:
                lines.append(
                    f"  call {e.call_id}  {e.tool_name}  {e.effect.value}  {e.state.value}"
                    + (f"  → {e.result_status.value}" if e.result_status else "")
                )
            return "\n".join(lines)

        out.emit(data, text)
        return EXIT_OK

    return await _with_store(a, run)


def _artifacts_show(a: argparse.Namespace, out: _Out) -> int:
    async def fetch(store: Any) -> tuple[ArtifactRef, bytes]:
        ref, data = await store.get_artifact(a.artifact_id)
        return ref, data

    async def read() -> tuple[ArtifactRef, bytes]:
        store = _open_store(a)
        try:
            return await fetch(store)
        finally:
            await store.close()

    ref, data = asyncio.run(read())
    if a.output:
        Path(a.output).write_bytes(data)
    if out.json:
        try:
            text: str | None = data.decode("utf-8")
        except UnicodeDecodeError:
            text = None
        meta = {"artifact_id": ref.id, "sha256": ref.sha256, "size": ref.size}
        out.emit(meta | {"media_type": ref.media_type, "text": None if a.output else text}, "")
    elif not a.output:
        sys.stdout.buffer.write(data)
        sys.stdout.flush()
    return EXIT_OK


async def _runs_list(a: argparse.Namespace, out: _Out) -> int:
    async def run(store: Any) -> int:
        runs = await store.list_runs(session_id=a.session_id)
        out.emit(
            [run_json(r) for r in runs],
            lambda: (
                "\n".join(f"{r.id}  {r.session_id}  {r.status.value}" for r in runs) or "no runs"
            ),
        )
        return EXIT_OK

    return await _with_store(a, run)


async def _with_service(a: argparse.Namespace, fn: Callable[[AgentService], Awaitable[int]]) -> int:
    from plait.runtime import Runtime

    runtime = Runtime.open(db=_db(a), model=getattr(a, "model", None))
    try:
        return await fn(runtime.service)
    finally:
        await runtime.close()


async def _runs_cancel(a: argparse.Namespace, out: _Out) -> int:
    async def run(service: AgentService) -> int:
        before = await service.get_run(a.run_id)
        r = await service.cancel(a.run_id)
        if before.status.terminal:
            text = f"run {r.id} already ended ({r.status.value}); nothing to cancel"
        elif r.status.terminal:
            text = f"cancelled run {r.id} ({r.status.value})"
        else:
            text = f"cancellation requested for run {r.id}; it stops at its next step"
        out.emit(run_json(r), text)
        return EXIT_OK

    return await _with_service(a, run)


async def _runs_recover(a: argparse.Namespace, out: _Out) -> int:
    async def run(service: AgentService) -> int:
        reports = await service.recover(run_id=a.run_id)
        data = [
            {
                "run_id": r.run_id,
                "outcome": r.outcome,
                "detail": r.detail,
                "run": None if r.result is None else run_json(r.result.run),
                "messages": []
                if r.result is None
                else [message_json(m) for m in r.result.messages],
            }
            for r in reports
        ]
        out.emit(
            data,
            lambda: (
                "\n".join(f"{r.run_id}: {r.outcome} ({r.detail})" for r in reports)
                or "no run needs recovery"
            ),
        )
        return EXIT_OK

    return await _with_service(a, run)


async def _runs_resolve(a: argparse.Namespace, out: _Out) -> int:
    async def run(service: AgentService) -> int:
        r = await service.resolve(a.run_id, a.call_id, a.status, a.note, by=a.by)
        out.emit(
            run_json(r),
            f"call {a.call_id} of run {r.id} resolved as {a.status}; "
            f"continue with: plait runs resume {r.id}",
        )
        return EXIT_OK

    return await _with_service(a, run)


async def _runs_resume(a: argparse.Namespace, out: _Out) -> int:
    async def run(service: AgentService) -> int:
        result = await service.resume(a.run_id)
        return _print_result(out, result)

    return await _with_service(a, run)


def _print_result(out: _Out, result: RunResult) -> int:
    run = result.run
    out.emit(
        run_json(run) | {"messages": [message_json(m) for m in result.messages]},
        lambda: "\n".join([*(message_text(m) for m in result.messages), "", run_text(run)]),
    )
    return EXIT_OK if run.status is RunStatus.COMPLETED else EXIT_RUN_NOT_COMPLETED


async def _send(a: argparse.Namespace, out: _Out) -> int:
    async def run(service: AgentService) -> int:
        result = await service.send(a.session_id, a.text, budget=_budget(a))
        return _print_result(out, result)

    return await _with_service(a, run)


def _run_async(coro_fn: Callable[[argparse.Namespace, _Out], Awaitable[int]]) -> Any:
    def runner(a: argparse.Namespace, out: _Out) -> int:
        return asyncio.run(coro_fn(a, out))  # type: ignore[arg-type]

    return runner


def _chat(a: argparse.Namespace, out: _Out) -> int:
    from plait.adapters.cli.chat import run_chat

    return run_chat(a, _budget(a))


def _demo(a: argparse.Namespace, out: _Out) -> int:
    from plait.adapters.cli.demo import run_demo

    return run_demo(db=_db(a), clean=a.clean, as_json=out.json)


_COMMANDS: dict[tuple[str, ...], Callable[[argparse.Namespace, _Out], int]] = {
    ("sessions", "new"): _run_async(_sessions_new),
    ("sessions", "list"): _run_async(_sessions_list),
    ("send",): _run_async(_send),
    ("history",): _run_async(_history),
    ("runs", "show"): _run_async(_runs_show),
    ("runs", "list"): _run_async(_runs_list),
    ("runs", "cancel"): _run_async(_runs_cancel),
    ("runs", "recover"): _run_async(_runs_recover),
    ("runs", "resolve"): _run_async(_runs_resolve),
    ("runs", "resume"): _run_async(_runs_resume),
    ("artifacts", "show"): _artifacts_show,
    ("chat",): _chat,
    ("demo",): _demo,
    **service_cmds.COMMANDS,
    **FORK_COMMANDS,
    **GOVERNANCE_COMMANDS,
    **COMPACTION_COMMANDS,
}


def _key(a: argparse.Namespace) -> tuple[str, ...]:
    sub = getattr(a, f"{a.command}_command", None)
    return (a.command, sub) if sub else (a.command,)


def _warn(
    message: Warning | str,
    category: type[Warning],
    filename: str,
    lineno: int,
    file: TextIO | None = None,
    line: str | None = None,
) -> None:
    print(f"plait: warning: {message}", file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    warnings.showwarning = _warn
    try:
        args = build_parser().parse_args(argv)
    except UsageError as e:
        if "--json" in argv:
            print(json.dumps({"error": e.to_dict()}, ensure_ascii=False, indent=2))
        print(e.details.get("usage", ""), file=sys.stderr)
        print(f"plait: error: {e.message}", file=sys.stderr)
        return EXIT_ERROR
    out = _Out(args.json)
    try:
        if getattr(args, "workspace", None) is not None:
            args.workspace = resolve_workspace(args.workspace)
        return _COMMANDS[_key(args)](args, out)
    except PlaitError as e:
        if out.json:
            print(json.dumps({"error": e.to_dict()}, ensure_ascii=False, indent=2))
        print(f"plait: error: {e.message}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        print("plait: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
