"""``plait chat``: an interactive session with rich rendering and a spinner.

Each message is one run. A call that needs approval is asked here, inline, with its exact
arguments (approve, approve for a time, or deny with a reason the model reads), and the
run continues. Ctrl-C during a run stops it and says the run's true state read back from
the store; a side effect whose outcome is unknown is asked about inline (succeeded or
failed, with a note) and the run continues (or, if the run was cancelled, the answer is
the next message). Ctrl-D at the prompt leaves (status 0), Ctrl-C there too (status 130).

With ``--json`` it is a line protocol for scripts: the first line printed is
``{"event": "session", "session_id": ...}``; then each line read from stdin is sent as a
message, every saved message is printed as one JSON line ``{"event": "message", ...}``,
followed by ``{"event": "run", ...}`` when the run ends, or ``{"event": "error", "error":
{...}}`` when the line could not be sent (e.g. it is not UTF-8); the chat goes on.
"""

from __future__ import annotations

import argparse
import getpass
import json
import sys
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any, Protocol

from rich.markup import escape

from plait.adapters.shapes import error_json, event_json, run_json
from plait.domain.errors import PlaitError
from plait.domain.messages import ToolStatus
from plait.domain.runs import Budget, Run, RunStatus
from plait.domain.session import ExecutionRecord, ExecutionState
from plait.domain.tools import EffectClass
from plait.entrypoints.cli import _loop
from plait.entrypoints.cli._io import Out, decode_utf8, terminal_safe
from plait.entrypoints.cli._live import json_lines, terminal_progress
from plait.entrypoints.cli._remembered import remember_model
from plait.entrypoints.cli._send import choose_mcp
from plait.entrypoints.cli.governance import DEFAULT_TTL, parse_ttl

if TYPE_CHECKING:
    from plait.application.approvals import Decided
    from plait.application.service import AgentService, RunResult
    from plait.runtime import Runtime

__all__ = ["run_chat"]


def _json_chat(
    service: AgentService, session_id: str, budget: Budget, mcp: tuple[str, ...] | None
) -> int:
    Out.line(event_json("session", {"session_id": session_id}))
    for number, raw in enumerate(sys.stdin.buffer, 1):
        try:
            text = decode_utf8(raw, f"input line {number}").rstrip("\r\n")
            if not text.strip():
                continue
            result = _loop.run(
                service.send(session_id, text, budget=budget, observer=json_lines, mcp_servers=mcp)
            )
        except PlaitError as error:
            Out.line(event_json("error", error_json(error)))
            continue
        Out.line(event_json("run", run_json(result.run)))
    return 0


class _Chat:
    """The interactive chat: runs shown live, and every question a run asks a person
    (an approval, an unknown outcome) asked here, inline, before the prompt returns."""

    def __init__(
        self,
        runtime: Runtime,
        session_id: str,
        budget: Budget,
        mcp: tuple[str, ...] | None = None,
    ) -> None:
        # lazy: rich costs ~100 ms and only a terminal run needs it
        from rich.console import Console

        self.rt = runtime
        self.service = runtime.service
        self.session_id = session_id
        self.budget = budget
        self.mcp = mcp
        """The MCP servers each run is offered (``--mcp``; ``None``: every one)."""
        self.console = Console()
        self.who = getpass.getuser()

    def say(self, markup: str) -> None:
        self.console.print(markup, highlight=False)

    def ask(self, prompt: str) -> str | None:
        """A line from the person; ``None`` if they leave the question (Ctrl-C, Ctrl-D)."""
        try:
            return self.console.input(prompt).strip()
        except (EOFError, KeyboardInterrupt):
            self.console.print()
            return None

    def drive(
        self,
        start: Callable[..., Coroutine[Any, Any, _HasRun]],
        run_id: str | None,
        known: frozenset[str] = frozenset(),
    ) -> Run | None:
        """Run ``start(observer=..., on_text=...)`` (a run's result, or a decision's) with
        live output; after Ctrl-C, the run's true state (read back from the store)."""
        try:
            with terminal_progress(self.console) as observe:
                result = _loop.run(start(observer=observe, on_text=observe.on_text))
        except KeyboardInterrupt:
            return self.interrupted(run_id, known)
        return result.run

    def interrupted(self, run_id: str | None, known: frozenset[str]) -> Run | None:
        async def read() -> Run | None:
            if run_id is not None:
                return await self.rt.queries.get_run(run_id)
            runs = await self.rt.queries.list_runs(session_id=self.session_id)
            return next((r for r in runs if r.id not in known), None)

        run = _loop.run(read())
        if run is None:
            self.say("[yellow]interrupted before the run started[/]")
            return None
        if run.status in (RunStatus.RUNNING, RunStatus.QUEUED):
            run = _loop.run(self.take_back(run))
        why = f" ({escape(terminal_safe(run.error.message))})" if run.error else ""
        self.say(f"[yellow]interrupted: run {run.id} is {run.status.value}{why}[/]")
        return run

    async def take_back(self, run: Run) -> Run:
        """This process drove ``run`` and its task is gone before the run was ended:
        rather than leave the session busy, a side effect that had started is recovered
        as ``awaiting_resolution`` (its outcome is unknown: asked about next); anything
        else is ended as the person asked."""
        detail = await self.rt.queries.run_detail(run.id)
        started = [
            e
            for e in detail.executions
            if e.state is ExecutionState.STARTED and e.effect is EffectClass.SIDE_EFFECT
        ]
        if started and run.status is RunStatus.RUNNING:
            await self.service.recover(run_id=run.id, force=True)
            return await self.rt.queries.get_run(run.id)
        return await self.service.cancel(run.id, force=True)

    async def _call_arguments(self, call_id: str) -> dict[str, Any] | None:
        for sm in await self.rt.queries.history(self.session_id):
            message = sm.message
            if message.kind == "assistant":
                for call in message.tool_calls:
                    if call.id == call_id:
                        return call.arguments()
        return None

    def show_call(self, tool: str, call_id: str) -> None:
        arguments = _loop.run(self._call_arguments(call_id))
        shown = "(not found)" if arguments is None else json.dumps(arguments, indent=2)
        self.say(f"  [bold]{escape(terminal_safe(tool))}[/] call {escape(call_id)} with arguments:")
        self.console.print(escape(terminal_safe(_indented(shown))), highlight=False)

    def settle(self, run: Run | None) -> None:
        """Ask what a stopped run needs from the person and continue it, until it ends or
        the person leaves a question unanswered."""
        while run is not None:
            if run.status is RunStatus.AWAITING_APPROVAL:
                run = self.approvals(run)
            elif run.status is RunStatus.AWAITING_RESOLUTION:
                run = self.resolve(run)
            else:
                if run.status is RunStatus.CANCELLED:
                    self.unknown_after_cancel(run)
                elif run.status is not RunStatus.COMPLETED:
                    why = f": {escape(terminal_safe(run.error.message))}" if run.error else ""
                    self.say(f"[yellow]run {run.status.value}{why}[/]")
                return

    def approvals(self, run: Run) -> Run | None:
        desk = self.rt.approval_desk()
        pending = _loop.run(desk.pending(run))
        if not pending:
            return None
        approval = pending[0]
        why = escape(terminal_safe(approval.reason))
        self.say(f"[bold yellow]approval needed[/] ({escape(approval.id)}): {why}")
        self.show_call(approval.tool_name, approval.call_id)
        while True:
            answer = self.ask(
                "[bold]" + escape("approve? [a]pprove, approve for a [t]ime, [d]eny > ") + "[/]"
            )
            if answer is None:
                self.say(
                    f"[yellow]left undecided: {approval.id} still waits (ask again by sending)[/]"
                )
                return None
            choice = answer.lower()
            kwargs: dict[str, Any]
            if choice in ("a", "approve", "y", "yes"):
                kwargs = {"approve": True, "ttl_seconds": parse_ttl(DEFAULT_TTL)}
            elif choice in ("t", "time"):
                ttl = self.ask("for how long (e.g. 90s, 10m, 2h)? ")
                if ttl is None:
                    continue
                try:
                    kwargs = {"approve": True, "ttl_seconds": parse_ttl(ttl)}
                except PlaitError as error:
                    self.say(f"[red]{escape(error.message)}[/]")
                    continue
            elif choice in ("d", "deny", "n", "no"):
                reason = self.ask("why (the model reads it)? ")
                if not reason:
                    self.say("[red]a denial needs a reason[/]")
                    continue
                kwargs = {"approve": False, "reason": reason}
            else:
                self.say("answer a, t or d")
                continue
            break

        async def start(**live: Any) -> Decided:
            return await desk.decide_and_continue(approval.id, grantor=self.who, **kwargs, **live)

        self.say(
            f"[green]{'approving' if kwargs['approve'] else 'denying'} {escape(approval.id)}[/]"
        )
        return self.drive(start, run.id)

    def resolve(self, run: Run) -> Run | None:
        unknown = self.unknown_calls(run.id)
        if not unknown:
            return None
        record = unknown[0]
        why = escape(terminal_safe(run.error.message)) if run.error else ""
        self.say(f"[bold yellow]outcome unknown[/]: {why}")
        self.show_call(record.tool_name, record.call_id)
        answer = self.ask_outcome()
        if answer is None:
            self.say(f"[yellow]run {run.id} still waits for what happened to {record.call_id}[/]")
            return None
        status, note = answer
        resolved = _loop.run(
            self.service.resolve(run.id, record.call_id, status, note, by=f"user:{self.who}")
        )
        if self.unknown_calls(run.id):
            return resolved  # another call to ask about

        async def start(**live: Any) -> RunResult:
            return await self.service.resume(run.id, **live)

        self.say(f"[green]resolved {escape(record.call_id)} as {status}; continuing[/]")
        return self.drive(start, run.id)

    def unknown_calls(self, run_id: str) -> list[ExecutionRecord]:
        detail = _loop.run(self.rt.queries.run_detail(run_id))
        return [e for e in detail.executions if e.result_status is ToolStatus.UNKNOWN]

    def ask_outcome(self) -> tuple[str, str] | None:
        while True:
            answer = self.ask("[bold]" + escape("what happened? [s]ucceeded, [f]ailed > ") + "[/]")
            if answer is None:
                return None
            status = {"s": "succeeded", "succeeded": "succeeded", "f": "failed", "failed": "failed"}
            if answer.lower() not in status:
                self.say("answer s or f")
                continue
            note = self.ask("what did you check (a note the model reads)? ")
            if not note:
                self.say("[red]a note is needed[/]")
                continue
            return status[answer.lower()], note

    def unknown_after_cancel(self, run: Run) -> None:
        """A cancelled run whose side effect was cut short: its result says ``unknown``;
        ask what happened and tell the model in the next message."""
        cut = self.unknown_calls(run.id)
        if not cut:
            return
        record = cut[0]
        self.say("[bold yellow]this call was cut short: whether its effect happened is unknown[/]")
        self.show_call(record.tool_name, record.call_id)
        answer = self.ask_outcome()
        if answer is None:
            self.say("[yellow]left unknown: the model sees the call's outcome as unknown[/]")
            return
        status, note = answer
        text = f"(the interrupted call {record.call_id} {record.tool_name} {status}: {note})"
        self.send(text)

    def send(self, text: str) -> None:
        async def start(**live: Any) -> RunResult:
            return await self.service.send(
                self.session_id, text, budget=self.budget, mcp_servers=self.mcp, **live
            )

        runs = _loop.run(self.rt.queries.list_runs(session_id=self.session_id))
        try:
            run = self.drive(start, None, frozenset(r.id for r in runs))
        except PlaitError as error:
            self.say(f"[red]error:[/] {escape(terminal_safe(error.message))}")
            return
        self.settle(run)

    def waiting_run(self) -> Run | None:
        session = _loop.run(self.rt.queries.get_session(self.session_id))
        if session.active_run_id is None:
            return None
        run = _loop.run(self.rt.queries.get_run(session.active_run_id))
        return run if run.status in _WAITING else None

    def loop(self) -> int:
        self.say(
            f"[bold]plait chat[/] session [cyan]{self.session_id}[/], model "
            f"{escape(self.service.model.name)}. Ctrl-C stops a run; Ctrl-D leaves."
        )
        self.settle(self.waiting_run())
        while True:
            try:
                text = self.console.input("[bold green]you> [/]")
            except EOFError:
                self.console.print()
                return 0
            except KeyboardInterrupt:
                self.console.print()
                return 130
            if not text.strip():
                continue
            if text.strip() in {"/exit", "/quit"}:
                return 0
            if (waiting := self.waiting_run()) is not None:
                self.settle(waiting)  # it must be answered first (the session is busy)
                if self.waiting_run() is not None:
                    continue
            self.send(text)


_WAITING = (RunStatus.AWAITING_APPROVAL, RunStatus.AWAITING_RESOLUTION)


class _HasRun(Protocol):
    @property
    def run(self) -> Run: ...


def _indented(text: str) -> str:
    return "\n".join("    " + line for line in text.splitlines())


def run_chat(args: argparse.Namespace, budget: Budget) -> int:
    # lazy: plait.runtime loads the application layer (~50 ms); --help does not need it
    from plait.runtime import Runtime

    remember_model(args, session_id=args.session_id)
    choose_mcp(args)
    runtime = Runtime.open(
        db=getattr(args, "db", None),
        model=args.model,
        policy=args.policy,
        mcp_servers=args.mcp_configs,
    )
    service = runtime.service

    async def start() -> str:
        if args.session_id:
            return (await runtime.queries.get_session(args.session_id)).id
        return (await service.create_session(workspace=args.workspace)).id

    try:
        service.check_can_run(budget)  # no model, no prices for --max-cost: fail first
        session_id = _loop.run(start())
        if getattr(args, "json", False):
            return _json_chat(service, session_id, budget, args.mcp_servers)
        return _Chat(runtime, session_id, budget, args.mcp_servers).loop()
    finally:
        _loop.run(runtime.close())
