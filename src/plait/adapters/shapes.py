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


def session_json(session: Session) -> dict[str, Any]:
    return {
        "session_id": session.id,
        "created_at": iso(session.created_at),
        "workspace": session.workspace,
        "title": session.title,
        "model": session.model,
        "owner": session.owner,
        "version": session.version,
        "active_run_id": session.active_run_id,
        "fork_origin": None
        if session.fork_origin is None
        else {
            "parent_session_id": session.fork_origin.parent_session_id,
            "fork_point_message_id": session.fork_origin.fork_point_message_id,
        },
    }


def artifact_json(artifact: ArtifactRef | None) -> dict[str, Any] | None:
    if artifact is None:
        return None
    return {
        "artifact_id": artifact.id,
        "sha256": artifact.sha256,
        "size": artifact.size,
        "media_type": artifact.media_type,
    }


def expiry_json(expiry: Expiry) -> dict[str, Any]:
    return {
        "expired_at": iso(expiry.expired_at),
        "policy": expiry.policy,
        "mode": expiry.mode,
        "digest": expiry.digest,
        "archive_id": expiry.archive_id,
    }


def _expired_item_json(item: ExpiredItem) -> dict[str, Any]:
    return {
        "session_id": item.session_id,
        "seq": item.seq,
        "message_id": item.message_id,
        "kind": item.kind,
        "created_at": iso(item.created_at),
        "held_by": list(item.held_by),
    }


def retention_json(report: RetentionReport) -> dict[str, Any]:
    return {
        "policy": report.policy,
        "mode": report.mode,
        "dry_run": report.dry_run,
        "cutoff": iso(report.cutoff),
        "expired": [_expired_item_json(x) for x in report.expired],
        "held_back": [{"reason": h.reason, "messages": h.messages} for h in report.held_back],
        "archive_id": report.archive_id,
    }


def restore_json(report: RestoreReport) -> dict[str, Any]:
    return {
        "archive_id": report.archive_id,
        "dry_run": report.dry_run,
        "restored": [_expired_item_json(x) for x in report.restored],
        "held_back": [{"reason": h.reason, "messages": h.messages} for h in report.held_back],
    }


def message_json(sm: StoredMessage, expiry: Expiry | None = None) -> dict[str, Any]:
    """A message; with ``expiry`` (its content was removed by the retention policy) the
    text fields hold the tombstone's placeholder and ``expired`` says when and why."""
    message = sm.message
    out: dict[str, Any] = {
        "seq": sm.seq,
        "message_id": message.id,
        "kind": message.kind,
        "run_id": message.run_id,
        "created_at": iso(message.created_at),
    }
    if message.kind == "user":
        out["text"] = message.text
    elif message.kind == "assistant":
        out["text"] = message.text
        out["step"] = message.step
        out["model"] = message.model
        out["tool_calls"] = [
            {"call_id": c.id, "name": c.name, "arguments": c.arguments()}
            for c in message.tool_calls
        ]
        out["usage"] = (
            None
            if message.usage is None
            else {
                "input_tokens": message.usage.input_tokens,
                "output_tokens": message.usage.output_tokens,
            }
        )
        out["output"] = message.output
    else:
        result = message.result
        out["step"] = message.step
        out["call_id"] = result.call_id
        out["tool_name"] = message.tool_name
        out["status"] = result.status.value
        out["content"] = result.content
        out["reason"] = result.reason
        out["artifact"] = artifact_json(result.artifact)
    if expiry is not None:
        out["expired"] = expiry_json(expiry)
    return out


def run_json(run: Run) -> dict[str, Any]:
    budget, usage = run.budget, run.usage
    return {
        "run_id": run.id,
        "session_id": run.session_id,
        "status": run.status.value,
        "model": run.model,
        "started_at": iso(run.started_at),
        "ended_at": iso(run.ended_at),
        "error": None
        if run.error is None
        else {"code": run.error.code, "message": run.error.message},
        "policy": run.policy,
        "mcp_servers": None if run.mcp_servers is None else list(run.mcp_servers),
        "usage": {
            "steps": usage.steps,
            "model_calls": usage.model_calls,
            "corrections": usage.corrections,
            "tool_calls": usage.tool_calls,
            "input_tokens": usage.input_tokens,
            "output_tokens": usage.output_tokens,
        },
        "budget": {
            "max_steps": budget.max_steps,
            "deadline_seconds": budget.deadline_seconds,
            "max_model_calls": budget.max_model_calls,
            "max_total_tokens": budget.max_total_tokens,
            "max_cost_usd": budget.max_cost_usd,
            "max_corrections": budget.max_corrections,
            "tool_timeout_seconds": budget.tool_timeout_seconds,
            "tool_output_cap_bytes": budget.tool_output_cap_bytes,
        },
        "lease": None
        if run.lease is None
        else {"owner": run.lease.owner, "expires_at": iso(run.lease.expires_at)},
        "cancel_requested": run.cancel_requested,
        "output_schema": None if run.output_schema is None else run.output_schema.schema(),
        "parent": parent_json(run.parent),
    }


def execution_json(record: ExecutionRecord) -> dict[str, Any]:
    return {
        "call_id": record.call_id,
        "tool_name": record.tool_name,
        "effect": record.effect.value,
        "state": record.state.value,
        "result_status": None if record.result_status is None else record.result_status.value,
        "args_digest": record.args_digest,
        "idempotency_key": record.idempotency_key,
        "requested_at": iso(record.requested_at),
        "started_at": iso(record.started_at),
        "settled_at": iso(record.settled_at),
        "decision": record.decision,
        "decided_by": record.decided_by,
        "decision_reason": record.decision_reason,
        "reviewed_at": iso(record.reviewed_at),
    }


def parent_json(parent: ParentCall | None) -> dict[str, Any] | None:
    """A sub-agent run's link to the parent call it answers."""
    if parent is None:
        return None
    return {
        "session_id": parent.session_id,
        "run_id": parent.run_id,
        "call_id": parent.call_id,
        "agent": parent.agent,
    }


def approval_json(
    approval: Approval, now: float, parent: ParentCall | None = None
) -> dict[str, Any]:
    """An approval request and its decision; its one ``status`` is as of ``now``
    (``pending``, ``approved``, ``denied``, ``expired`` or ``consumed``: an expired request
    is stored as pending or approved). ``parent``: the request comes from a sub-agent's
    run, which answers that call of its parent."""
    return {
        "parent": parent_json(parent),
        "approval_id": approval.id,
        "status": approval.state(now),
        "session_id": approval.session_id,
        "run_id": approval.run_id,
        "call_id": approval.call_id,
        "tool_name": approval.tool_name,
        "args_digest": approval.args_digest,
        "scope": list(approval.scope),
        "workspace_state": approval.workspace_state,
        "reason": approval.reason,
        "requested_at": iso(approval.requested_at),
        "grantor": approval.grantor,
        "decided_at": iso(approval.decided_at),
        "expires_at": iso(approval.expires_at),
        "denial_reason": approval.denial_reason,
        "consumed_by": approval.consumed_by,
        "consumed_at": iso(approval.consumed_at),
    }


def error_json(error: PlaitError) -> dict[str, Any]:
    """``{"error": {code, message, details}}``: what a failed command prints."""
    return {"error": error.to_dict()}


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


def snapshot_json(snapshot: WorkspaceSnapshot | None) -> dict[str, Any] | None:
    if snapshot is None:
        return None
    return {
        "repository": snapshot.repository,
        "source_workspace": snapshot.source_workspace,
        "ref": snapshot.ref,
        "commit": snapshot.commit,
        "worktree": snapshot.worktree,
        "not_covered": list(snapshot.not_covered),
    }


def fork_json(record: ForkRecord | None) -> dict[str, Any] | None:
    if record is None:
        return None
    return {
        "request_id": record.request_id,
        "source_session_id": record.source_session_id,
        "through_message_id": record.through_message_id,
        "through_seq": record.through_seq,
        "source_version": record.source_version,
        "created_at": iso(record.created_at),
        "snapshot": snapshot_json(record.snapshot),
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


def constraint_json(constraint: Constraint) -> dict[str, Any]:
    return {"text": constraint.text, "source_message_id": constraint.source_message_id}


def summary_json(summary: Summary) -> dict[str, Any]:
    """An activated summary: what it covers, what it kept, who made it."""
    body, facts = summary.body, summary.facts
    return {
        "id": summary.id,
        "generation": summary.generation,
        "covers": {
            "from_seq": 1,
            "through_seq": summary.covered_through_seq,
            "through_message_id": summary.covered_through_message_id,
            "source_digest": summary.source_digest,
        },
        "replaces_in_context": f"messages 1..{summary.covered_through_seq}",
        "goal": body.goal,
        "constraints": [
            {"text": n.text, "source_ids": list(n.source_ids)} for n in body.constraints
        ],
        "decisions": [{"text": n.text, "source_ids": list(n.source_ids)} for n in body.decisions],
        "open_questions": [
            {"text": q.text, "uncertainty": q.uncertainty, "source_ids": list(q.source_ids)}
            for q in body.open_questions
        ],
        "evidence": [
            {"message_id": e.message_id, "artifact_id": e.artifact_id, "note": e.note}
            for e in body.evidence
        ],
        "facts": {
            "files": [
                {
                    "path": x.path,
                    "action": x.action,
                    "content_hash": x.content_hash,
                    "source_message_id": x.source_message_id,
                }
                for x in facts.files
            ],
            "commands": [
                {
                    "command": x.command,
                    "exit_status": x.exit_status,
                    "tool_status": x.tool_status,
                    "source_message_id": x.source_message_id,
                }
                for x in facts.commands
            ],
            "failing_tests": [
                {"name": x.name, "source_message_id": x.source_message_id}
                for x in facts.failing_tests
            ],
            "constraints": [constraint_json(c) for c in facts.constraints],
        },
        "model": summary.model,
        "template_version": summary.template_version,
        "trigger": summary.trigger,
        "created_at": iso(summary.created_at),
        "source_tokens": summary.source_tokens,
        "summary_tokens": summary.summary_tokens,
        "meter": summary.meter,
        "schema_version": summary.schema_version,
    }


def outcome_json(outcome: CompactionOutcome) -> dict[str, Any]:
    return {
        "status": outcome.status,
        "detail": outcome.detail,
        "trigger": outcome.trigger,
        "generation_before": outcome.generation_before,
        "generation_after": outcome.generation_after,
        "tokens_before": outcome.measured_tokens,
        "tokens_after": outcome.tokens_after,
        "threshold_tokens": outcome.threshold_tokens,
        "insufficient": outcome.insufficient,
        "summarizer": {
            "calls": outcome.summarizer_calls,
            "input_tokens": outcome.summarizer_input_tokens,
            "output_tokens": outcome.summarizer_output_tokens,
        },
        "summary": None if outcome.summary is None else summary_json(outcome.summary),
    }


def context_item_source(message: Message) -> tuple[str, str]:
    """(source, trust) of a context item."""
    if message.id.startswith("ctx_preamble_"):
        return "plait: constraints and summary", "derived"
    if isinstance(message, UserMessage):
        return "user", "user"
    if isinstance(message, ToolResultMessage):
        return f"tool {message.tool_name}", "data"
    return "assistant", "model"


def view_json(view: ContextView, *, items: bool) -> dict[str, Any]:
    tokens = view.tokens
    data: dict[str, Any] = {
        "model": view.model,
        "meter": {"name": view.meter, "exact": view.exact},
        "budget": {
            "context_window": view.budget.window,
            "reserved_output": view.budget.reserved_output,
            "safety_margin": view.budget.safety_margin,
            "input_budget": view.budget.input_budget,
            "compaction_threshold": view.threshold_tokens,
        },
        "tokens": {
            "instructions": tokens.instructions,
            "tools": tokens.tools,
            "constraints_and_summary": tokens.preamble,
            "pinned_request": tokens.pinned,
            "recent_history": tokens.tail,
            "total": tokens.total,
            "raw_history_alone": view.full_history_tokens,
        },
        "calibration": {"factor": view.calibration, "corrected_total": view.corrected_total},
        "over_threshold": view.over_threshold,
        "over_budget": view.over_budget,
        "history_messages": view.history_messages,
        "raw_tail_from_seq": view.tail_from_seq,
        "pinned_message_id": view.pinned_message_id,
        "summary": None if view.summary is None else summary_json(view.summary),
        "constraints": [constraint_json(c) for c in view.constraints],
    }
    if items:
        data["items"] = [
            {"id": m.id, "kind": m.kind, "source": s, "trust": trust}
            for m in view.context.items
            for s, trust in [context_item_source(m)]
        ]
    return data


def compaction_event_json(event: CompactionEvent) -> dict[str, Any]:
    """A compaction in a run (run events, ``send --events``): ``phase`` is ``started``,
    ``activated``, ``failed`` (``detail`` says why) or ``skipped``."""
    return {
        "phase": event.phase,
        "trigger": event.trigger,
        "step": event.step,
        "detail": event.detail,
        "generation": event.generation,
        "covered_through_seq": event.covered_through_seq,
        "tokens_before": event.tokens_before,
        "tokens_after": event.tokens_after,
        "insufficient": event.insufficient,
    }


def webhook_json(endpoint: Endpoint) -> dict[str, Any]:
    """An endpoint, without its secret (shown once, when it is added)."""
    return {
        "id": endpoint.id,
        "url": endpoint.url,
        "events": list(endpoint.events),
        "principal": endpoint.principal,
        "status": endpoint.status.value,
        "consecutive_failures": endpoint.failures,
        "paused_reason": endpoint.paused_reason,
        "created_at": iso(endpoint.created_at),
    }


def delivery_json(delivery: Delivery) -> dict[str, Any]:
    return {
        "webhook_id": delivery.endpoint_id,
        "event_id": delivery.event_id,
        "type": delivery.event_type,
        "status": delivery.status.value,
        "attempts": delivery.attempts,
        "next_attempt_at": iso(delivery.next_attempt_at)
        if delivery.status.value == "pending"
        else None,
        "last_error": delivery.last_error,
        "last_status_code": delivery.last_status_code,
        "delivered_at": iso(delivery.delivered_at),
    }
