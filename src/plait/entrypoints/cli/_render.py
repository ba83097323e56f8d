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


def plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def session_line(s: Session) -> str:
    title = f"  {s.title!r}" if s.title else ""
    active = f"  (run {s.active_run_id} active)" if s.active_run_id else ""
    return f"{s.id}{title}  v{s.version}  {s.workspace or '-'}{active}"


def lease_hint(lease: LeaseInfo, *, command: str = "recover --run") -> str:
    return (
        f"run {lease.run.id} is held by {lease.owner} until {iso(lease.expires_at)} "
        f"(in {lease.seconds_left:.0f} s); 'plait runs recover' takes the run over once the "
        f"lease has expired; if that process is gone, 'plait runs {command} "
        f"{lease.run.id} --force' does it now"
    )


def _indent(text: str, limit: int = 1200) -> str:
    if len(text) > limit:
        text = text[:limit] + f"\n… ({len(text) - limit} more characters)"
    return textwrap.indent(text, "    ")


def expired_line(sm: StoredMessage, e: Expiry) -> str:
    m = sm.message
    where = f" {m.tool_name} [{m.result.call_id}]" if m.kind == "tool_result" else ""
    archived = f", archived in artifact {e.archive_id}" if e.archive_id else ""
    return (
        f"[{sm.seq}] {m.kind}{where}: expired {iso(e.expired_at)} by the retention policy "
        f"{e.policy}{archived} (written {iso(m.created_at)})"
    )


def message_text(sm: StoredMessage, expiry: Expiry | None = None) -> str:
    if expiry is not None:
        return expired_line(sm, expiry)
    return message_text_of(message_json(sm))


def message_text_of(m: dict[str, Any]) -> str:
    """A message in its JSON shape (``message_json``; as the API serves it) for people:
    local ``send`` and ``send --server`` print the same lines."""
    seq = m["seq"]
    if m["kind"] == "user":
        return f"[{seq}] user:\n{_indent(m['text'])}"
    if m["kind"] == "assistant":
        lines = [f"[{seq}] assistant (step {m['step']}):"]
        if m["text"]:
            lines.append(_indent(m["text"]))
        for c in m["tool_calls"]:
            args = json.dumps(c["arguments"], ensure_ascii=False)
            if len(args) > 200:
                args = args[:200] + "…"
            lines.append(f"    → {c['name']}({args})  [{c['call_id']}]")
        return "\n".join(lines)
    head = f"[{seq}] {m['tool_name']} [{m['call_id']}] {m['status']}"
    if m["reason"] and m["reason"] != m["content"]:
        head += f": {m['reason']}"
    if (a := m["artifact"]) is not None:
        head += f" (whole output: artifact {a['artifact_id']}, {a['size']} bytes)"
    return head + ("\n" + _indent(m["content"], 600) if m["content"] else "")


def run_text(r: Run) -> str:
    return run_text_of(run_json(r))


def run_text_of(r: dict[str, Any]) -> str:
    """A run in its JSON shape (``run_json``) for people."""
    u = r["usage"]
    lines = [
        f"run {r['run_id']}  session {r['session_id']}",
        f"  status      {r['status']}",
        f"  model       {r['model']}",
        f"  started     {r['started_at']}",
        f"  ended       {r['ended_at'] or '-'}",
        f"  usage       {plural(u['steps'], 'step')}, "
        f"{plural(u['model_calls'], 'model call')} "
        f"({plural(u['corrections'], 'correction')}), {plural(u['tool_calls'], 'tool call')}, "
        f"{u['input_tokens']} in / {u['output_tokens']} out tokens",
    ]
    if (e := r["error"]) is not None:
        lines.append(f"  error       {e['code']}: {e['message']}")
    if (lease := r["lease"]) is not None:
        lines.append(f"  lease       {lease['owner']} until {lease['expires_at']}")
    return "\n".join(lines)


def decision_line(e: ExecutionRecord) -> list[str]:
    """``plait runs show``: who decided about a call, when and why."""
    if e.decision is None:
        return []
    return [f"    {e.decision} by {e.decided_by} at {iso(e.reviewed_at)}: {e.decision_reason}"]


def approval_lines(approvals: list[Approval], now: float) -> list[str]:
    lines = []
    for x in approvals:
        who = f" by {x.grantor} at {iso(x.decided_at)}" if x.grantor else ""
        why = f": {x.denial_reason}" if x.denial_reason else ""
        lines.append(f"  approval {x.id}  call {x.call_id}  {x.state(now)}{who}{why}")
    return lines
