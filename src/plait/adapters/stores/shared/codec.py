"""Explicit codecs between domain values and the JSON shapes the stores persist.

Every persisted shape carries ``schema_version``. Decoders accept every version listed in
``_UPCASTERS`` plus the current one, upcast old shapes step by step, and refuse anything
else with :class:`~plait.domain.errors.CorruptStoreError` (a newer version says "upgrade
plait"). Fixtures of each shape live in ``tests/stores/fixtures/``; keep them loading.

Shapes (version 1), keys whose value would be ``None`` are omitted from messages:

- user message: ``{schema_version, kind: "user", id, text, created_at, run_id?}``
- assistant message: ``{..., kind: "assistant", step, model?, tool_calls?: [[id, name,
  arguments_json], ...], usage?: {input_tokens, output_tokens}, vendor_state?: {vendor,
  version, data}, output?: the validated value of a typed final answer}``
- tool result message: ``{..., kind: "tool_result", step, tool_name, call_id, status,
  content, reason?, artifact?: {id, sha256, size, media_type}}``
- session, run, execution record: every field, enums as their values (a run's
  ``output_schema``: ``{name, schema}`` or null, absent in runs stored before it).

The SQLite store keeps messages in columns; :func:`assistant_extra` and
:func:`tool_result_extra` encode the sparse remainder (the same sub-shapes as above).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, TypeVar

from plait.domain.answers import OutputSchema
from plait.domain.errors import CorruptStoreError, PlaitError
from plait.domain.messages import (
    ArtifactRef,
    AssistantMessage,
    Message,
    ToolCall,
    ToolResult,
    ToolResultMessage,
    ToolStatus,
    Usage,
    UserMessage,
    VendorState,
)
from plait.domain.runs import Budget, Lease, Run, RunError, RunStatus, RunUsage
from plait.domain.session import ExecutionRecord, ExecutionState, ForkOrigin, Session
from plait.domain.subagents import ParentCall
from plait.domain.tools import EffectClass

__all__ = [
    "SCHEMA_VERSION",
    "assistant_extra",
    "check_schema",
    "decode",
    "dumps",
    "execution_from_dict",
    "execution_to_dict",
    "loads",
    "message_from_dict",
    "message_to_dict",
    "run_from_dict",
    "run_to_dict",
    "session_from_dict",
    "session_to_dict",
    "tool_result_extra",
]

SCHEMA_VERSION = 1

dumps: Callable[[Any], str] = json.JSONEncoder(
    ensure_ascii=False, separators=(",", ":"), allow_nan=False
).encode
loads: Callable[[str], Any] = json.JSONDecoder().decode

Upcaster = Callable[[dict[str, Any]], dict[str, Any]]
_UPCASTERS: dict[str, dict[int, Upcaster]] = {}
"""``{shape: {old_version: fn}}``; ``fn`` turns version ``n`` into ``n + 1``. Empty while
version 1 is the only one."""

T = TypeVar("T")


def check_schema(data: dict[str, Any], what: str) -> dict[str, Any]:
    """Return ``data`` at the current schema version (upcast if older), or raise."""
    version = data.get("schema_version")
    if version == SCHEMA_VERSION:
        return data
    if isinstance(version, int) and not isinstance(version, bool):
        if version > SCHEMA_VERSION:
            raise CorruptStoreError(
                f"{what} has schema_version {version}, newer than this plait understands "
                f"({SCHEMA_VERSION}); upgrade plait to read it",
                schema_version=version,
                supported=SCHEMA_VERSION,
            )
        steps = _UPCASTERS.get(what, {})
        while version < SCHEMA_VERSION and version in steps:
            data = steps[version](data)
            version = data["schema_version"]
        if version == SCHEMA_VERSION:
            return data
    raise CorruptStoreError(
        f"{what} has unknown schema_version {version!r} (this plait reads {SCHEMA_VERSION})",
        schema_version=repr(version),
        supported=SCHEMA_VERSION,
    )


def decode(fn: Callable[[dict[str, Any]], T], data: Any, what: str) -> T:
    """Run a decoder and turn any shape error into :class:`CorruptStoreError`."""
    if not isinstance(data, dict):
        raise CorruptStoreError(f"{what} is not a JSON object: {type(data).__name__}")
    try:
        return fn(check_schema(data, what))
    except CorruptStoreError:
        raise
    except (LookupError, TypeError, ValueError, AttributeError, PlaitError) as e:
        raise CorruptStoreError(f"{what} is malformed: {type(e).__name__}: {e}") from e


# --- messages -------------------------------------------------------------------------------


def _usage_to_dict(usage: Usage) -> dict[str, Any]:
    out = {"input_tokens": usage.input_tokens, "output_tokens": usage.output_tokens}
    # Optional keys, written only when reported, so older readers' shapes are unchanged.
    if usage.cached_input_tokens:
        out["cached_input_tokens"] = usage.cached_input_tokens
    if usage.reasoning_tokens:
        out["reasoning_tokens"] = usage.reasoning_tokens
    return out


def _vendor_to_dict(state: VendorState) -> dict[str, Any]:
    return {"vendor": state.vendor, "version": state.version, "data": state.data}


def _artifact_to_dict(ref: ArtifactRef) -> dict[str, Any]:
    return {"id": ref.id, "sha256": ref.sha256, "size": ref.size, "media_type": ref.media_type}


def artifact_from_dict(d: dict[str, Any]) -> ArtifactRef:
    return ArtifactRef(
        id=d["id"], sha256=d["sha256"], size=int(d["size"]), media_type=d["media_type"]
    )


def assistant_extra(m: AssistantMessage) -> dict[str, Any] | None:
    """The sparse part of an assistant message: tool calls, usage, vendor state, the
    typed answer's value."""
    if not m.tool_calls and m.usage is None and m.vendor_state is None and m.output is None:
        return None
    extra: dict[str, Any] = {}
    if m.tool_calls:
        extra["tool_calls"] = [[c.id, c.name, c.arguments_json] for c in m.tool_calls]
    if m.usage is not None:
        extra["usage"] = _usage_to_dict(m.usage)
    if m.vendor_state is not None:
        extra["vendor_state"] = _vendor_to_dict(m.vendor_state)
    if m.output is not None:
        extra["output"] = m.output
    return extra


def tool_result_extra(m: ToolResultMessage) -> dict[str, Any] | None:
    """The sparse part of a tool result: reason and artifact reference."""
    r = m.result
    if r.reason is None and r.artifact is None:
        return None
    extra: dict[str, Any] = {}
    if r.reason is not None:
        extra["reason"] = r.reason
    if r.artifact is not None:
        extra["artifact"] = _artifact_to_dict(r.artifact)
    return extra


def assistant_from_parts(
    *,
    id: str,
    text: str,
    created_at: float,
    run_id: str | None,
    step: int,
    model: str | None,
    extra: dict[str, Any] | None,
) -> AssistantMessage:
    if extra is None:
        return AssistantMessage(
            id=id, text=text, created_at=created_at, run_id=run_id, step=step, model=model
        )
    calls = extra.get("tool_calls")
    usage = extra.get("usage")
    vendor = extra.get("vendor_state")
    return AssistantMessage(
        id=id,
        text=text,
        created_at=created_at,
        run_id=run_id,
        step=step,
        model=model,
        tool_calls=tuple(ToolCall(id=c[0], name=c[1], arguments_json=c[2]) for c in calls)
        if calls
        else (),
        usage=None
        if usage is None
        else Usage(
            input_tokens=usage["input_tokens"],
            output_tokens=usage["output_tokens"],
            cached_input_tokens=usage.get("cached_input_tokens", 0),
            reasoning_tokens=usage.get("reasoning_tokens", 0),
        ),
        vendor_state=None
        if vendor is None
        else VendorState(vendor=vendor["vendor"], version=vendor["version"], data=vendor["data"]),
        output=extra.get("output"),
    )


def tool_result_from_parts(
    *,
    id: str,
    text: str,
    created_at: float,
    run_id: str | None,
    step: int,
    call_id: str,
    tool_name: str,
    status: str,
    extra: dict[str, Any] | None,
) -> ToolResultMessage:
    reason = artifact = None
    if extra is not None:
        reason = extra.get("reason")
        a = extra.get("artifact")
        artifact = None if a is None else artifact_from_dict(a)
    return ToolResultMessage(
        id=id,
        tool_name=tool_name,
        created_at=created_at,
        run_id=run_id,
        step=step,
        result=ToolResult(
            call_id=call_id,
            status=ToolStatus(status),
            content=text,
            reason=reason,
            artifact=artifact,
        ),
    )


def message_to_dict(m: Message) -> dict[str, Any]:
    d: dict[str, Any] = {"schema_version": SCHEMA_VERSION, "kind": m.kind, "id": m.id}
    if isinstance(m, UserMessage):
        d["text"] = m.text
    elif isinstance(m, AssistantMessage):
        d["text"] = m.text
        d["step"] = m.step
        if m.model is not None:
            d["model"] = m.model
        extra = assistant_extra(m)
        if extra is not None:
            d.update(extra)
    else:
        d["step"] = m.step
        d["tool_name"] = m.tool_name
        d["call_id"] = m.result.call_id
        d["status"] = m.result.status.value
        d["content"] = m.result.content
        extra = tool_result_extra(m)
        if extra is not None:
            d.update(extra)
    d["created_at"] = m.created_at
    if m.run_id is not None:
        d["run_id"] = m.run_id
    return d


def _message_from_dict(d: dict[str, Any]) -> Message:
    kind = d["kind"]
    if kind == "user":
        return UserMessage(
            id=d["id"], text=d["text"], created_at=d["created_at"], run_id=d.get("run_id")
        )
    if kind == "assistant":
        return assistant_from_parts(
            id=d["id"],
            text=d["text"],
            created_at=d["created_at"],
            run_id=d.get("run_id"),
            step=d["step"],
            model=d.get("model"),
            extra=d,
        )
    if kind == "tool_result":
        return tool_result_from_parts(
            id=d["id"],
            text=d["content"],
            created_at=d["created_at"],
            run_id=d.get("run_id"),
            step=d["step"],
            call_id=d["call_id"],
            tool_name=d["tool_name"],
            status=d["status"],
            extra=d,
        )
    raise ValueError(f"unknown message kind {kind!r}")


def message_from_dict(d: Any) -> Message:
    return decode(_message_from_dict, d, "message")


# --- sessions -------------------------------------------------------------------------------


def session_to_dict(s: Session) -> dict[str, Any]:
    return {
        "schema_version": SCHEMA_VERSION,
        "id": s.id,
        "created_at": s.created_at,
        "owner": s.owner,
        "workspace": s.workspace,
        "version": s.version,
        "active_run_id": s.active_run_id,
        "fork_origin": None
        if s.fork_origin is None
        else {
            "parent_session_id": s.fork_origin.parent_session_id,
            "fork_point_message_id": s.fork_origin.fork_point_message_id,
        },
        "title": s.title,
        "model": s.model,
    }


def _session_from_dict(d: dict[str, Any]) -> Session:
    fork = d["fork_origin"]
    return Session(
        id=d["id"],
        created_at=d["created_at"],
        owner=d["owner"],
        workspace=d["workspace"],
        version=d["version"],
        active_run_id=d["active_run_id"],
        fork_origin=None
        if fork is None
        else ForkOrigin(
            parent_session_id=fork["parent_session_id"],
            fork_point_message_id=fork["fork_point_message_id"],
        ),
        title=d["title"],
        model=d.get("model"),
    )


def session_from_dict(d: Any) -> Session:
    return decode(_session_from_dict, d, "session")


# --- runs -----------------------------------------------------------------------------------

_BUDGET_FIELDS = (
    "max_steps",
    "deadline_seconds",
    "max_model_calls",
    "max_total_tokens",
    "max_corrections",
    "tool_timeout_seconds",
    "tool_output_cap_bytes",
    "max_cost_usd",
)
_NEW_BUDGET = frozenset({"max_cost_usd"})
"""Budget fields added after schema 1: absent from older records (their default then)."""
_USAGE_FIELDS = (
    "steps",
    "model_calls",
    "corrections",
    "tool_calls",
    "input_tokens",
    "output_tokens",
)


def run_to_dict(r: Run) -> dict[str, Any]:
    return {
        "schema_version": SCHEMA_VERSION,
        "id": r.id,
        "session_id": r.session_id,
        "status": r.status.value,
        "budget": {f: getattr(r.budget, f) for f in _BUDGET_FIELDS},
        "started_at": r.started_at,
        "model": r.model,
        "usage": {f: getattr(r.usage, f) for f in _USAGE_FIELDS},
        "ended_at": r.ended_at,
        "error": None if r.error is None else {"code": r.error.code, "message": r.error.message},
        "lease": None
        if r.lease is None
        else {"owner": r.lease.owner, "expires_at": r.lease.expires_at},
        "cancel_requested": r.cancel_requested,
        "lease_token": r.lease_token,
        "model_spec": r.model_spec,
        "deadline_at": r.deadline_at,
        "policy": r.policy,
        "mcp_servers": None if r.mcp_servers is None else list(r.mcp_servers),
        "trace_context": r.trace_context,
        "output_schema": None
        if r.output_schema is None
        else {"name": r.output_schema.name, "schema": r.output_schema.schema()},
        "parent": None
        if r.parent is None
        else {
            "session_id": r.parent.session_id,
            "run_id": r.parent.run_id,
            "call_id": r.parent.call_id,
            "agent": r.parent.agent,
        },
    }


def _run_from_dict(d: dict[str, Any]) -> Run:
    budget = d["budget"]
    usage = d["usage"]
    error = d["error"]
    lease = d["lease"]
    return Run(
        id=d["id"],
        session_id=d["session_id"],
        status=RunStatus(d["status"]),
        budget=Budget(
            **{f: budget[f] for f in _BUDGET_FIELDS if f in budget or f not in _NEW_BUDGET}
        ),
        started_at=d["started_at"],
        model=d["model"],
        usage=RunUsage(**{f: usage[f] for f in _USAGE_FIELDS}),
        ended_at=d["ended_at"],
        error=None if error is None else RunError(code=error["code"], message=error["message"]),
        lease=None
        if lease is None
        else Lease(owner=lease["owner"], expires_at=lease["expires_at"]),
        cancel_requested=bool(d["cancel_requested"]),
        lease_token=int(d.get("lease_token", 0)),
        model_spec=d.get("model_spec"),
        deadline_at=d.get("deadline_at"),
        policy=d.get("policy"),
        mcp_servers=None if d.get("mcp_servers") is None else tuple(d["mcp_servers"]),
        trace_context=d.get("trace_context"),
        output_schema=_output_schema(d.get("output_schema")),
        parent=None if d.get("parent") is None else ParentCall(**d["parent"]),
    )


def _output_schema(d: dict[str, Any] | None) -> OutputSchema | None:
    return None if d is None else OutputSchema.create(d["schema"], name=d["name"])


def run_from_dict(d: Any) -> Run:
    return decode(_run_from_dict, d, "run")


# --- execution records ----------------------------------------------------------------------


def execution_to_dict(e: ExecutionRecord) -> dict[str, Any]:
    return {
        "schema_version": SCHEMA_VERSION,
        "session_id": e.session_id,
        "run_id": e.run_id,
        "call_id": e.call_id,
        "tool_name": e.tool_name,
        "effect": e.effect.value,
        "args_digest": e.args_digest,
        "idempotency_key": e.idempotency_key,
        "state": e.state.value,
        "requested_at": e.requested_at,
        "reviewed_at": e.reviewed_at,
        "started_at": e.started_at,
        "settled_at": e.settled_at,
        "result_status": None if e.result_status is None else e.result_status.value,
        "decision": e.decision,
        "decided_by": e.decided_by,
        "decision_reason": e.decision_reason,
        "note": e.note,
    }


def _execution_from_dict(d: dict[str, Any]) -> ExecutionRecord:
    status = d["result_status"]
    return ExecutionRecord(
        session_id=d["session_id"],
        run_id=d["run_id"],
        call_id=d["call_id"],
        tool_name=d["tool_name"],
        effect=EffectClass(d["effect"]),
        args_digest=d["args_digest"],
        idempotency_key=d["idempotency_key"],
        state=ExecutionState(d["state"]),
        requested_at=d["requested_at"],
        reviewed_at=d["reviewed_at"],
        started_at=d["started_at"],
        settled_at=d["settled_at"],
        result_status=None if status is None else ToolStatus(status),
        decision=d.get("decision"),
        decided_by=d.get("decided_by"),
        decision_reason=d["decision_reason"],
        note=d.get("note"),
    )


def execution_from_dict(d: Any) -> ExecutionRecord:
    return decode(_execution_from_dict, d, "execution record")
