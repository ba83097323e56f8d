"""The commands that read (through :class:`~plait.application.queries.Queries`) or control
runs (through :class:`~plait.application.service.AgentService`). None of them opens a store
or builds a domain object itself: they get a :class:`~plait.runtime.Runtime`."""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from plait.adapters.shapes import (
    approval_json,
    execution_json,
    message_json,
    run_json,
    session_json,
    workspace_json,
)
from plait.adapters.system import SystemClock, owner_alive
from plait.domain.errors import RunStateError
from plait.domain.runs import RunStatus
from plait.entrypoints.cli._io import InputError, Out
from plait.entrypoints.cli._options import UsageError
from plait.entrypoints.cli._render import (
    approval_lines,
    decision_line,
    lease_hint,
    message_text,
    run_text,
    session_line,
)
from plait.entrypoints.cli.compaction import history_summaries
from plait.entrypoints.cli.forks import branch_lines

if TYPE_CHECKING:
    from plait.application.service import RunResult
    from plait.runtime import Runtime

__all__ = [
    "EXIT_ERROR",
    "EXIT_OK",
    "EXIT_RUN_NOT_COMPLETED",
    "artifacts_show",
    "history",
    "print_result",
    "runs_cancel",
    "runs_list",
    "runs_recover",
    "runs_resolve",
    "runs_resume",
    "runs_show",
    "sessions_list",
    "sessions_new",
]

EXIT_OK, EXIT_RUN_NOT_COMPLETED, EXIT_ERROR = 0, 1, 2


def exit_for(status: RunStatus) -> int:
    return EXIT_OK if status is RunStatus.COMPLETED else EXIT_RUN_NOT_COMPLETED


async def sessions_new(rt: Runtime, args: argparse.Namespace, out: Out) -> int:
    session = await rt.service.create_session(
        workspace=args.workspace, title=args.title, model=args.model
    )
    out.emit(session_json(session), session.id)
    return EXIT_OK


async def sessions_list(rt: Runtime, args: argparse.Namespace, out: Out) -> int:
    sessions = await rt.queries.list_sessions(limit=args.limit)
    out.emit(
        {"sessions": [session_json(s) for s in sessions]},
        lambda: "\n".join(session_line(s) for s in sessions) or "no sessions",
    )
    return EXIT_OK


async def history(rt: Runtime, args: argparse.Namespace, out: Out) -> int:
    messages = await rt.queries.history(args.session_id)
    session = await rt.queries.get_session(args.session_id)
    fork = await rt.queries.fork_record(session.id) if session.fork_origin else None
    head = branch_lines(session, fork)
    data: dict[str, Any] = {"session_id": args.session_id}
    if session.fork_origin is not None:  # a branch says what it is bound to
        data["workspace"] = workspace_json(session, fork)
    extra, tail = await history_summaries(rt.queries, session.id)
    expired = await rt.queries.expiries(session.id)
    out.emit(
        data | {"messages": [message_json(m, expired.get(m.message.id)) for m in messages]} | extra,
        lambda: (
            "\n".join(
                [*head, *(message_text(m, expired.get(m.message.id)) for m in messages), *tail]
            )
            or "no messages yet"
        ),
    )
    return EXIT_OK


async def runs_show(rt: Runtime, args: argparse.Namespace, out: Out) -> int:
    detail = await rt.queries.run_detail(args.run_id)
    run, executions = detail.run, detail.executions
    approvals = await rt.queries.list_approvals(run_id=run.id)
    now = SystemClock().now()
    data = run_json(run) | {
        "executions": [execution_json(execution) for execution in executions],
        "approvals": [approval_json(x, now) for x in approvals],
    }

    def text() -> str:
        lines = [run_text(run)]
        for execution in executions:
            lines.append(
                f"  call {execution.call_id}  {execution.tool_name}  {execution.effect.value}  "
                f"{execution.state.value}"
                + (f"  → {execution.result_status.value}" if execution.result_status else "")
            )
            lines.extend(decision_line(execution))
        lines.extend(approval_lines(approvals, now))
        return "\n".join(lines)

    out.emit(data, text)
    return EXIT_OK


async def runs_list(rt: Runtime, args: argparse.Namespace, out: Out) -> int:
    runs = await rt.queries.list_runs(session_id=args.session_id)
    out.emit(
        {"runs": [run_json(r) for r in runs]},
        lambda: "\n".join(f"{r.id}  {r.session_id}  {r.status.value}" for r in runs) or "no runs",
    )
    return EXIT_OK


async def artifacts_show(rt: Runtime, args: argparse.Namespace, out: Out) -> int:
    ref, data = await rt.queries.artifact(args.artifact_id)
    if args.output:
        try:
            await asyncio.to_thread(Path(args.output).write_bytes, data)
        except OSError as error:
            raise InputError(
                f"cannot write -o {args.output!r}: {error.strerror or type(error).__name__}; "
                "choose a writable path",
                path=args.output,
            ) from None
    if out.json:
        try:
            text: str | None = data.decode("utf-8")
        except UnicodeDecodeError:
            text = None
        meta = {"artifact_id": ref.id, "sha256": ref.sha256, "size": ref.size}
        out.emit(meta | {"media_type": ref.media_type, "text": None if args.output else text}, "")
    elif not args.output:
        sys.stdout.buffer.write(data)
        sys.stdout.flush()
    return EXIT_OK


async def _check_force(rt: Runtime, run_id: str) -> None:
    """A forced takeover only when the lease holder is not a live process on this host."""

    for lease in await rt.queries.live_leases(run_id=run_id):
        if owner_alive(lease.owner):
            raise RunStateError(
                f"run {run_id} is held by {lease.owner}, a process that is still running on "
                "this host; stop that process first, or let it finish",
                run_id=run_id,
                owner=lease.owner,
            )


async def runs_cancel(rt: Runtime, args: argparse.Namespace, out: Out) -> int:
    before = await rt.service.get_run(args.run_id)
    if args.force:
        await _check_force(rt, args.run_id)
    run = await rt.service.cancel(args.run_id, force=args.force)
    if before.status.terminal:
        text = f"run {run.id} already ended ({run.status.value}); nothing to cancel"
    elif run.status.terminal:
        text = f"cancelled run {run.id} ({run.status.value})"
    elif args.force and run.status is RunStatus.AWAITING_RESOLUTION:
        why = run.error.message if run.error else "a call's outcome is unknown"
        text = (
            f"run {run.id} awaits resolution, not cancelled: {why}; record what happened "
            f"(plait runs resolve {run.id} --call CALL ...), then `plait runs resume` ends it"
        )
    else:
        text = f"cancellation requested for run {run.id}; it stops at its next step"
        leases = await rt.queries.live_leases(run_id=run.id)
        if leases:
            alive = owner_alive(leases[0].owner)
            text += "\n" + lease_hint(leases[0], command="cancel", alive=alive)
    out.emit(run_json(run), text)
    return EXIT_OK


async def runs_recover(rt: Runtime, args: argparse.Namespace, out: Out) -> int:
    if args.force:
        if args.run_id is None:
            raise UsageError("--force takes over one run: name it with --run RUN")
        await _check_force(rt, args.run_id)
    reports = await rt.service.recover(run_id=args.run_id, force=args.force)
    data = [
        {
            "run_id": r.run_id,
            "outcome": r.outcome,
            "detail": r.detail,
            "run": None if r.result is None else run_json(r.result.run),
            "messages": [] if r.result is None else [message_json(m) for m in r.result.messages],
        }
        for r in reports
    ]
    # The named run left alone, or no run at all: what a live lease holds, until when, and
    # whether that process still runs here (text only: a report's detail names the lease).
    named_skipped = args.run_id is not None and any(r.outcome == "skipped" for r in reports)
    waiting = (
        await rt.queries.live_leases(run_id=args.run_id) if named_skipped or not reports else []
    )
    alive = {w.run.id: owner_alive(w.owner) for w in waiting}

    def text() -> str:
        hints = [lease_hint(w, alive=alive[w.run.id]) for w in waiting]
        if reports:
            return "\n".join([*(f"{r.run_id}: {r.outcome} ({r.detail})" for r in reports), *hints])
        return "\n".join(["no run needs recovery", *hints])

    out.emit({"recoveries": data}, text)
    driven = [r.result.run.status for r in reports if r.result is not None]
    return max((exit_for(s) for s in driven), default=EXIT_OK)


async def runs_resolve(rt: Runtime, args: argparse.Namespace, out: Out) -> int:
    run = await rt.service.resolve(
        args.run_id, args.call_id, args.status, args.note, by=args.by, queue=args.queue
    )
    then = (
        "queued for a worker"
        if run.status is RunStatus.QUEUED
        else f"continue with: plait runs resume {run.id}"
    )
    out.emit(
        run_json(run), f"call {args.call_id} of run {run.id} resolved as {args.status}; {then}"
    )
    return EXIT_OK


async def runs_resume(rt: Runtime, args: argparse.Namespace, out: Out) -> int:
    if args.queue:
        run = await rt.service.requeue(args.run_id)
        out.emit(run_json(run), f"run {run.id} is {run.status.value}: a worker continues it")
        return EXIT_OK
    return print_result(out, await rt.service.resume(args.run_id))


def print_result(out: Out, result: RunResult, *, shown: bool = False) -> int:
    """The run and the messages it added (``shown``: the messages were already printed
    live, so text mode prints only the run)."""
    run = result.run
    texts = [] if shown else [message_text(m) for m in result.messages]
    out.emit(
        run_json(run)
        | {"messages": [message_json(m) for m in result.messages], "output": result.output},
        lambda: "\n".join([*texts, "", run_text(run)] if texts else [run_text(run)]),
    )
    return exit_for(run.status)
