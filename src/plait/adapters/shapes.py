"""plait's public JSON shapes: session, message, run, execution, artifact, error and the
progress events of a run. The one serializer every surface uses (the CLI now, the HTTP API
too), documented in the README's "JSON output"; field names are stable and timestamps are
ISO 8601 in UTC."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from plait.domain.errors import PlaitError
from plait.domain.forks import ForkRecord, WorkspaceSnapshot
from plait.domain.governance import Approval
from plait.domain.messages import ArtifactRef, Message, ToolResultMessage, UserMessage
from plait.domain.retention import Expiry
from plait.domain.runs import Run
from plait.domain.session import ExecutionRecord, Session, StoredMessage
from plait.domain.subagents import ParentCall

if TYPE_CHECKING:
    from plait.application.compaction import CompactionOutcome, ContextView
    from plait.application.events import CompactionEvent
    from plait.application.retention import ExpiredItem, RestoreReport, RetentionReport
    from plait.domain.summary import Constraint, Summary
from plait.domain.webhooks import Delivery, Endpoint

__all__ = [
    "NOT_ROLLED_BACK",
    "approval_json",
    "artifact_json",
    "compaction_event_json",
    "constraint_json",
    "context_item_source",
    "delivery_json",
    "error_json",
    "event_json",
    "execution_json",
    "expiry_json",
    "fork_json",
    "iso",
    "message_json",
    "outcome_json",
    "restore_json",
    "retention_json",
    "run_json",
    "session_json",
    "snapshot_json",
    "summary_json",
    "view_json",
    "webhook_json",
    "workspace_json",
]


def iso(ts: float | None) -> str | None:
    if ts is None:
        return None
    return datetime.fromtimestamp(ts, tz=UTC).isoformat(timespec="milliseconds")


def session_json(s: Session) -> dict[str, Any]:
    return {
        "session_id": s.id,
        "created_at": iso(s.created_at),
        "workspace": s.workspace,
        "title": s.title,
        "model": s.model,
        "owner": s.owner,
        "version": s.version,
        "active_run_id": s.active_run_id,
        "fork_origin": None
        if s.fork_origin is None
        else {
            "parent_session_id": s.fork_origin.parent_session_id,
            "fork_point_message_id": s.fork_origin.fork_point_message_id,
        },
    }


def artifact_json(a: ArtifactRef | None) -> dict[str, Any] | None:
    if a is None:
        return None
    return {"artifact_id": a.id, "sha256": a.sha256, "size": a.size, "media_type": a.media_type}


def expiry_json(e: Expiry) -> dict[str, Any]:
    return {
        "expired_at": iso(e.expired_at),
        "policy": e.policy,
        "mode": e.mode,
        "digest": e.digest,
        "archive_id": e.archive_id,
    }


def _expired_item_json(x: ExpiredItem) -> dict[str, Any]:
    return {
        "session_id": x.session_id,
        "seq": x.seq,
        "message_id": x.message_id,
        "kind": x.kind,
        "created_at": iso(x.created_at),
        "held_by": list(x.held_by),
    }


def retention_json(r: RetentionReport) -> dict[str, Any]:
    return {
        "policy": r.policy,
        "mode": r.mode,
        "dry_run": r.dry_run,
        "cutoff": iso(r.cutoff),
        "expired": [_expired_item_json(x) for x in r.expired],
        "held_back": [{"reason": h.reason, "messages": h.messages} for h in r.held_back],
        "archive_id": r.archive_id,
    }


def restore_json(r: RestoreReport) -> dict[str, Any]:
    return {
        "archive_id": r.archive_id,
        "dry_run": r.dry_run,
        "restored": [_expired_item_json(x) for x in r.restored],
        "held_back": [{"reason": h.reason, "messages": h.messages} for h in r.held_back],
    }


def message_json(sm: StoredMessage, expiry: Expiry | None = None) -> dict[str, Any]:
    """A message; with ``expiry`` (its content was removed by the retention policy) the
    text fields hold the tombstone's placeholder and ``expired`` says when and why."""
    m = sm.message
    out: dict[str, Any] = {
        "seq": sm.seq,
        "message_id": m.id,
        "kind": m.kind,
        "run_id": m.run_id,
        "created_at": iso(m.created_at),
    }
    if m.kind == "user":
        out["text"] = m.text
    elif m.kind == "assistant":
        out["text"] = m.text
        out["step"] = m.step
        out["model"] = m.model
        out["tool_calls"] = [
            {"call_id": c.id, "name": c.name, "arguments": c.arguments()} for c in m.tool_calls
        ]
        out["usage"] = (
            None
            if m.usage is None
            else {"input_tokens": m.usage.input_tokens, "output_tokens": m.usage.output_tokens}
        )
        out["output"] = m.output
    else:
        r = m.result
        out["step"] = m.step
        out["call_id"] = r.call_id
        out["tool_name"] = m.tool_name
        out["status"] = r.status.value
        out["content"] = r.content
        out["reason"] = r.reason
        out["artifact"] = artifact_json(r.artifact)
    if expiry is not None:
        out["expired"] = expiry_json(expiry)
    return out


def run_json(r: Run) -> dict[str, Any]:
    b, u = r.budget, r.usage
    return {
        "run_id": r.id,
        "session_id": r.session_id,
        "status": r.status.value,
        "model": r.model,
        "started_at": iso(r.started_at),
        "ended_at": iso(r.ended_at),
        "error": None if r.error is None else {"code": r.error.code, "message": r.error.message},
        "policy": r.policy,
        "mcp_servers": None if r.mcp_servers is None else list(r.mcp_servers),
        "usage": {
            "steps": u.steps,
            "model_calls": u.model_calls,
            "corrections": u.corrections,
            "tool_calls": u.tool_calls,
            "input_tokens": u.input_tokens,
            "output_tokens": u.output_tokens,
        },
        "budget": {
            "max_steps": b.max_steps,
            "deadline_seconds": b.deadline_seconds,
            "max_model_calls": b.max_model_calls,
            "max_total_tokens": b.max_total_tokens,
            "max_cost_usd": b.max_cost_usd,
            "max_corrections": b.max_corrections,
            "tool_timeout_seconds": b.tool_timeout_seconds,
            "tool_output_cap_bytes": b.tool_output_cap_bytes,
        },
        "lease": None
        if r.lease is None
        else {"owner": r.lease.owner, "expires_at": iso(r.lease.expires_at)},
        "cancel_requested": r.cancel_requested,
        "output_schema": None if r.output_schema is None else r.output_schema.schema(),
        "parent": parent_json(r.parent),
    }


def execution_json(e: ExecutionRecord) -> dict[str, Any]:
    return {
        "call_id": e.call_id,
        "tool_name": e.tool_name,
        "effect": e.effect.value,
        "state": e.state.value,
        "result_status": None if e.result_status is None else e.result_status.value,
        "args_digest": e.args_digest,
        "idempotency_key": e.idempotency_key,
        "requested_at": iso(e.requested_at),
        "started_at": iso(e.started_at),
        "settled_at": iso(e.settled_at),
        "decision": e.decision,
        "decided_by": e.decided_by,
        "decision_reason": e.decision_reason,
        "reviewed_at": iso(e.reviewed_at),
    }


def parent_json(p: ParentCall | None) -> dict[str, Any] | None:
    """A sub-agent run's link to the parent call it answers."""
    if p is None:
        return None
    return {"session_id": p.session_id, "run_id": p.run_id, "call_id": p.call_id, "agent": p.agent}


def approval_json(a: Approval, now: float, parent: ParentCall | None = None) -> dict[str, Any]:
    """An approval request and its decision; its one ``status`` is as of ``now``
    (``pending``, ``approved``, ``denied``, ``expired`` or ``consumed``: an expired request
    is stored as pending or approved). ``parent``: the request comes from a sub-agent's
    run, which answers that call of its parent."""
    return {
        "parent": parent_json(parent),
        "approval_id": a.id,
        "status": a.state(now),
        "session_id": a.session_id,
        "run_id": a.run_id,
        "call_id": a.call_id,
        "tool_name": a.tool_name,
        "args_digest": a.args_digest,
        "scope": list(a.scope),
        "workspace_state": a.workspace_state,
        "reason": a.reason,
        "requested_at": iso(a.requested_at),
        "grantor": a.grantor,
        "decided_at": iso(a.decided_at),
        "expires_at": iso(a.expires_at),
        "denial_reason": a.denial_reason,
        "consumed_by": a.consumed_by,
        "consumed_at": iso(a.consumed_at),
    }


def error_json(e: PlaitError) -> dict[str, Any]:
    """``{"error": {code, message, details}}``: what a failed command prints."""
    return {"error": e.to_dict()}


def event_json(kind: str, data: dict[str, Any]) -> dict[str, Any]:
    """One line of a live stream (``chat --json``, ``send --events``): ``{"event": kind,
    ...data}`` where ``kind`` is ``session``, ``message`` (a message shape), ``run`` (a run
    shape, when the run ends) or ``error`` (``{"error": {...}}``)."""
    return {"event": kind, **data}


# --- forks ----------------------------------------------------------------------------------

NOT_ROLLED_BACK = (
    "files were not rolled back to the fork point: the branch's tools see the directory "
    "as it is now"
)


def snapshot_json(s: WorkspaceSnapshot | None) -> dict[str, Any] | None:
    if s is None:
        return None
    return {
        "repository": s.repository,
        "source_workspace": s.source_workspace,
        "ref": s.ref,
        "commit": s.commit,
        "worktree": s.worktree,
        "not_covered": list(s.not_covered),
    }


def fork_json(r: ForkRecord | None) -> dict[str, Any] | None:
    if r is None:
        return None
    return {
        "request_id": r.request_id,
        "source_session_id": r.source_session_id,
        "through_message_id": r.through_message_id,
        "through_seq": r.through_seq,
        "source_version": r.source_version,
        "created_at": iso(r.created_at),
        "snapshot": snapshot_json(r.snapshot),
    }


def workspace_json(session: Session, record: ForkRecord | None) -> dict[str, Any]:
    """Which workspace a session is bound to, and for a branch, that nothing was rolled
    back (or which snapshot it was checked out from)."""
    snap = None if record is None else record.snapshot
    if session.fork_origin is None:
        note = None
    elif snap is not None:
        note = (
            f"a separate worktree checked out from snapshot {snap.commit[:12]} of "
            f"{snap.source_workspace}; not covered: {'; '.join(snap.not_covered)}"
        )
    else:
        note = NOT_ROLLED_BACK
    return {
        "path": session.workspace,
        "rolled_back": False,
        "snapshot": snapshot_json(snap),
        "note": note,
    }


# --- compaction -----------------------------------------------------------------------------


def constraint_json(c: Constraint) -> dict[str, Any]:
    return {"text": c.text, "source_message_id": c.source_message_id}


def summary_json(s: Summary) -> dict[str, Any]:
    """An activated summary: what it covers, what it kept, who made it."""
    b, f = s.body, s.facts
    return {
        "id": s.id,
        "generation": s.generation,
        "covers": {
            "from_seq": 1,
            "through_seq": s.covered_through_seq,
            "through_message_id": s.covered_through_message_id,
            "source_digest": s.source_digest,
        },
        "replaces_in_context": f"messages 1..{s.covered_through_seq}",
        "goal": b.goal,
        "constraints": [{"text": n.text, "source_ids": list(n.source_ids)} for n in b.constraints],
        "decisions": [{"text": n.text, "source_ids": list(n.source_ids)} for n in b.decisions],
        "open_questions": [
            {"text": q.text, "uncertainty": q.uncertainty, "source_ids": list(q.source_ids)}
            for q in b.open_questions
        ],
        "evidence": [
            {"message_id": e.message_id, "artifact_id": e.artifact_id, "note": e.note}
            for e in b.evidence
        ],
        "facts": {
            "files": [
                {"path": x.path, "action": x.action, "content_hash": x.content_hash,
                 "source_message_id": x.source_message_id}
                for x in f.files
            ],
            "commands": [
                {"command": x.command, "exit_status": x.exit_status,
                 "tool_status": x.tool_status, "source_message_id": x.source_message_id}
                for x in f.commands
            ],
            "failing_tests": [
                {"name": x.name, "source_message_id": x.source_message_id}
                for x in f.failing_tests
            ],
            "constraints": [constraint_json(c) for c in f.constraints],
        },
        "model": s.model,
        "template_version": s.template_version,
        "trigger": s.trigger,
        "created_at": iso(s.created_at),
        "source_tokens": s.source_tokens,
        "summary_tokens": s.summary_tokens,
        "meter": s.meter,
        "schema_version": s.schema_version,
    }  # fmt: skip


def outcome_json(o: CompactionOutcome) -> dict[str, Any]:
    return {
        "status": o.status,
        "detail": o.detail,
        "trigger": o.trigger,
        "generation_before": o.generation_before,
        "generation_after": o.generation_after,
        "tokens_before": o.measured_tokens,
        "tokens_after": o.tokens_after,
        "threshold_tokens": o.threshold_tokens,
        "insufficient": o.insufficient,
        "summarizer": {
            "calls": o.summarizer_calls,
            "input_tokens": o.summarizer_input_tokens,
            "output_tokens": o.summarizer_output_tokens,
        },
        "summary": None if o.summary is None else summary_json(o.summary),
    }


def context_item_source(m: Message) -> tuple[str, str]:
    """(source, trust) of a context item."""
    if m.id.startswith("ctx_preamble_"):
        return "plait: constraints and summary", "derived"
    if isinstance(m, UserMessage):
        return "user", "user"
    if isinstance(m, ToolResultMessage):
        return f"tool {m.tool_name}", "data"
    return "assistant", "model"


def view_json(v: ContextView, *, items: bool) -> dict[str, Any]:
    t = v.tokens
    data: dict[str, Any] = {
        "model": v.model,
        "meter": {"name": v.meter, "exact": v.exact},
        "budget": {
            "context_window": v.budget.window,
            "reserved_output": v.budget.reserved_output,
            "safety_margin": v.budget.safety_margin,
            "input_budget": v.budget.input_budget,
            "compaction_threshold": v.threshold_tokens,
        },
        "tokens": {
            "instructions": t.instructions,
            "tools": t.tools,
            "constraints_and_summary": t.preamble,
            "pinned_request": t.pinned,
            "recent_history": t.tail,
            "total": t.total,
            "raw_history_alone": v.full_history_tokens,
        },
        "calibration": {"factor": v.calibration, "corrected_total": v.corrected_total},
        "over_threshold": v.over_threshold,
        "over_budget": v.over_budget,
        "history_messages": v.history_messages,
        "raw_tail_from_seq": v.tail_from_seq,
        "pinned_message_id": v.pinned_message_id,
        "summary": None if v.summary is None else summary_json(v.summary),
        "constraints": [constraint_json(c) for c in v.constraints],
    }
    if items:
        data["items"] = [
            {"id": m.id, "kind": m.kind, "source": s, "trust": trust}
            for m in v.context.items
            for s, trust in [context_item_source(m)]
        ]
    return data


def compaction_event_json(e: CompactionEvent) -> dict[str, Any]:
    """A compaction in a run (run events, ``send --events``): ``phase`` is ``started``,
    ``activated``, ``failed`` (``detail`` says why) or ``skipped``."""
    return {
        "phase": e.phase,
        "trigger": e.trigger,
        "step": e.step,
        "detail": e.detail,
        "generation": e.generation,
        "covered_through_seq": e.covered_through_seq,
        "tokens_before": e.tokens_before,
        "tokens_after": e.tokens_after,
        "insufficient": e.insufficient,
    }


def webhook_json(e: Endpoint) -> dict[str, Any]:
    """An endpoint, without its secret (shown once, when it is added)."""
    return {
        "id": e.id,
        "url": e.url,
        "events": list(e.events),
        "principal": e.principal,
        "status": e.status.value,
        "consecutive_failures": e.failures,
        "paused_reason": e.paused_reason,
        "created_at": iso(e.created_at),
    }


def delivery_json(d: Delivery) -> dict[str, Any]:
    return {
        "webhook_id": d.endpoint_id,
        "event_id": d.event_id,
        "type": d.event_type,
        "status": d.status.value,
        "attempts": d.attempts,
        "next_attempt_at": iso(d.next_attempt_at) if d.status.value == "pending" else None,
        "last_error": d.last_error,
        "last_status_code": d.last_status_code,
        "delivered_at": iso(d.delivered_at),
    }
