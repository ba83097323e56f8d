"""``plait approvals approve|deny``: record a person's decision and continue the run.

Through :class:`~plait.application.approvals.ApprovalDesk`, as the HTTP API: once none of
the run's requests is pending, the run goes on from the waiting call (an approved call
runs, a denied one is settled ``denied`` and the model reads the reason). Here this
process drives it to its end or its next wait and prints the outcome as ``plait send``
does; ``--queue`` hands it to a worker instead (service mode)."""

from __future__ import annotations

import argparse
import getpass
import sys
from typing import TYPE_CHECKING, Any

from plait.adapters.shapes import approval_json, iso, message_json, run_json
from plait.adapters.system import SystemClock
from plait.domain.errors import ConfigError
from plait.domain.governance import ApprovalStatus
from plait.domain.runs import RunStatus
from plait.entrypoints.cli import _loop
from plait.entrypoints.cli._commands import EXIT_OK, exit_for
from plait.entrypoints.cli._io import Out
from plait.entrypoints.cli._live import terminal_progress
from plait.entrypoints.cli._render import message_text, plural, run_text

if TYPE_CHECKING:
    from plait.application.approvals import ApprovalDesk, Decided
    from plait.domain.governance import Approval
    from plait.domain.runs import Run
    from plait.runtime import Runtime

__all__ = ["decide"]


def decide(args: argparse.Namespace, out: Out, *, approve: bool, ttl: float | None) -> int:
    """Approve (``ttl`` seconds) or deny (``a.reason``) ``a.approval_id``."""
    reason = None if approve else args.reason
    if not approve and not (reason or "").strip():
        raise ConfigError("--reason must say why (the model reads it)")
    grantor = args.by or getpass.getuser()
    kwargs: dict[str, Any] = {"approve": approve, "grantor": grantor}
    kwargs |= {"ttl_seconds": ttl} if approve else {"reason": reason}

    async def go() -> int:
        # lazy: plait.runtime loads the application layer (~50 ms); --help does not need it
        from plait.runtime import Runtime

        db = getattr(args, "db", None)
        if args.queue:  # a worker continues it: no model, no tools here
            rt = Runtime.open(db=db, store_only=True)
        else:
            rt = Runtime.open(db=db, model=args.model, create=False, policy=args.policy)
        try:
            desk = rt.approval_desk()
            if args.queue:
                return await _queue(rt, desk, args.approval_id, kwargs, out)
            return await _continue(desk, args.approval_id, kwargs, out)
        finally:
            await rt.close()

    return _loop.run(go())


def _head(approval: Approval) -> str:
    verb = "approved" if approval.status is ApprovalStatus.APPROVED else "denied"
    until = f" until {iso(approval.expires_at)}" if approval.expires_at is not None else ""
    return f"{verb} {approval.id} ({approval.tool_name}, call {approval.call_id}){until}"


def _waiting_lines(run_id: str, pending: tuple[Approval, ...]) -> list[str]:
    lines = [f"run {run_id} waits for {plural(len(pending), 'more decision')}:"]
    for request in pending:
        lines.append(
            f"  {request.id}  {request.tool_name}  call {request.call_id}  why: {request.reason}"
        )
        lines.append(
            f"    plait approvals approve {request.id}   or   plait approvals deny {request.id} "
            f'--reason "..."'
        )
    return lines


def _not_continued(run: Run) -> str:
    if run.status is RunStatus.QUEUED:
        return f"run {run.id} is queued again: a worker continues it"
    if run.status.terminal:
        return f"run {run.id} already ended ({run.status.value}): nothing to continue"
    return f"run {run.id} is {run.status.value}: another process continues it"


async def _continue(desk: ApprovalDesk, approval_id: str, kw: dict[str, Any], out: Out) -> int:
    if out.json or not sys.stdout.isatty():
        done = await desk.decide_and_continue(approval_id, **kw)
        shown = False
    else:
        # lazy: rich costs ~100 ms and only a terminal run needs it
        from rich.console import Console

        console = Console()
        with terminal_progress(console) as observe:
            done = await desk.decide_and_continue(
                approval_id, **kw, observer=observe, on_text=observe.on_text
            )
        shown = True
    _print(out, done, shown=shown)
    return EXIT_OK if done.result is None else exit_for(done.run.status)


def _print(out: Out, done: Decided, *, shown: bool) -> None:
    now = desk_now()
    added = () if done.result is None else done.result.messages
    data = {
        "approval": approval_json(done.approval, now),
        "continued": done.result is not None,
        "run": run_json(done.run) | {"messages": [message_json(m) for m in added]},
        "waiting_for": [approval_json(p, now) for p in done.waiting_for],
    }

    def text() -> str:
        lines = [_head(done.approval)]
        if done.result is None:
            if done.waiting_for:
                lines.extend(_waiting_lines(done.run.id, done.waiting_for))
            else:
                lines.append(_not_continued(done.run))
            return "\n".join(lines)
        if not shown:
            lines.extend(message_text(m) for m in added)
        lines.extend(["", run_text(done.run)])
        if done.waiting_for:
            lines.extend(_waiting_lines(done.run.id, done.waiting_for))
        return "\n".join(lines)

    out.emit(data, text)


async def _queue(
    rt: Runtime, desk: ApprovalDesk, approval_id: str, kw: dict[str, Any], out: Out
) -> int:
    decided = await desk.decide(approval_id, **kw)
    run = await rt.queries.get_run(decided.run_id)
    pending = await desk.pending(run)
    now = desk_now()
    data = {
        "approval": approval_json(decided, now),
        "continued": False,
        "run": run_json(run) | {"messages": []},
        "waiting_for": [approval_json(p, now) for p in pending],
    }

    def text() -> str:
        lines = [_head(decided)]
        if pending:
            lines.extend(_waiting_lines(run.id, pending))
        else:
            lines.append(_not_continued(run))
        return "\n".join(lines)

    out.emit(data, text)
    return EXIT_OK


def desk_now() -> float:
    return SystemClock().now()
