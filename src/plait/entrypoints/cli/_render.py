"""Plain-text rendering for people (``--json`` gives the machine shapes)."""

from __future__ import annotations

import json
import textwrap
from typing import TYPE_CHECKING, Any

from plait.adapters.shapes import iso, message_json, run_json
from plait.domain.retention import Expiry
from plait.domain.runs import Run
from plait.domain.session import Session, StoredMessage

if TYPE_CHECKING:
    from plait.application.queries import LeaseInfo
    from plait.domain.governance import Approval
    from plait.domain.session import ExecutionRecord

__all__ = [
    "approval_lines",
    "decision_line",
    "lease_hint",
    "message_text",
    "message_text_of",
    "plural",
    "run_text",
    "run_text_of",
    "session_line",
]


def plural(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"


def session_line(session: Session) -> str:
    title = f"  {session.title!r}" if session.title else ""
    active = f"  (run {session.active_run_id} active)" if session.active_run_id else ""
    return f"{session.id}{title}  v{session.version}  {session.workspace or '-'}{active}"


def lease_hint(
    lease: LeaseInfo, *, command: str = "recover --run", alive: bool | None = None
) -> str:
    """When and how a leased run can be taken over. ``alive``: whether its holder is a
    process still running on this host (None: it cannot be told, e.g. another host)."""
    held = (
        f"run {lease.run.id} is held by {lease.owner} until {iso(lease.expires_at)} "
        f"(in {lease.seconds_left:.0f} s)"
    )
    force = f"'plait runs {command} {lease.run.id} --force'"
    if alive is False:
        return (
            f"{held}, a process of this host that is no longer running: {force} does it "
            "now, else 'plait runs recover' takes the run over once the lease has expired"
        )
    if alive:
        return (
            f"{held}, a process still running on this host: it carries the run on "
            "('plait runs recover' takes the run over if it stops and its lease expires)"
        )
    return (
        f"{held}; 'plait runs recover' takes the run over once the lease has expired; if "
        f"that process is gone, {force} does it now"
    )


def _indent(text: str, limit: int = 1200) -> str:
    if len(text) > limit:
        text = text[:limit] + f"\n… ({len(text) - limit} more characters)"
    return textwrap.indent(text, "    ")


def expired_line(sm: StoredMessage, expiry: Expiry) -> str:
    message = sm.message
    where = (
        f" {message.tool_name} [{message.result.call_id}]" if message.kind == "tool_result" else ""
    )
    archived = f", archived in artifact {expiry.archive_id}" if expiry.archive_id else ""
    return (
        f"[{sm.seq}] {message.kind}{where}: expired {iso(expiry.expired_at)} by the retention "
        f"policy "
        f"{expiry.policy}{archived} (written {iso(message.created_at)})"
    )


def message_text(sm: StoredMessage, expiry: Expiry | None = None) -> str:
    if expiry is not None:
        return expired_line(sm, expiry)
    return message_text_of(message_json(sm))


def message_text_of(message: dict[str, Any]) -> str:
    """A message in its JSON shape (``message_json``; as the API serves it) for people:
    local ``send`` and ``send --server`` print the same lines."""
    seq = message["seq"]
    if message["kind"] == "user":
        return f"[{seq}] user:\n{_indent(message['text'])}"
    if message["kind"] == "assistant":
        lines = [f"[{seq}] assistant (step {message['step']}):"]
        if message["text"]:
            lines.append(_indent(message["text"]))
        for call in message["tool_calls"]:
            args = json.dumps(call["arguments"], ensure_ascii=False)
            if len(args) > 200:
                args = args[:200] + "…"
            lines.append(f"    → {call['name']}({args})  [{call['call_id']}]")
        return "\n".join(lines)
    head = f"[{seq}] {message['tool_name']} [{message['call_id']}] {message['status']}"
    if message["reason"] and message["reason"] != message["content"]:
        head += f": {message['reason']}"
    if (artifact := message["artifact"]) is not None:
        head += f" (whole output: artifact {artifact['artifact_id']}, {artifact['size']} bytes)"
    return head + ("\n" + _indent(message["content"], 600) if message["content"] else "")


def run_text(run: Run) -> str:
    return run_text_of(run_json(run))


def run_text_of(run: dict[str, Any]) -> str:
    """A run in its JSON shape (``run_json``) for people."""
    usage = run["usage"]
    lines = [
        f"run {run['run_id']}  session {run['session_id']}",
        f"  status      {run['status']}",
        f"  model       {run['model']}",
        f"  started     {run['started_at']}",
        f"  ended       {run['ended_at'] or '-'}",
        f"  usage       {plural(usage['steps'], 'step')}, "
        f"{plural(usage['model_calls'], 'model call')} "
        f"({plural(usage['corrections'], 'correction')}), "
        f"{plural(usage['tool_calls'], 'tool call')}, "
        f"{usage['input_tokens']} in / {usage['output_tokens']} out tokens",
    ]
    if (error := run["error"]) is not None:
        lines.append(f"  error       {error['code']}: {error['message']}")
    if (lease := run["lease"]) is not None:
        lines.append(f"  lease       {lease['owner']} until {lease['expires_at']}")
    return "\n".join(lines)


def decision_line(execution: ExecutionRecord) -> list[str]:
    """``plait runs show``: who decided about a call, when and why."""
    if execution.decision is None:
        return []
    return [
        f"    {execution.decision} by {execution.decided_by} at {iso(execution.reviewed_at)}: "
        f"{execution.decision_reason}"
    ]


def approval_lines(approvals: list[Approval], now: float) -> list[str]:
    lines = []
    for approval in approvals:
        who = f" by {approval.grantor} at {iso(approval.decided_at)}" if approval.grantor else ""
        why = f": {approval.denial_reason}" if approval.denial_reason else ""
        lines.append(
            f"  approval {approval.id}  call {approval.call_id}  {approval.state(now)}{who}{why}"
        )
    return lines
