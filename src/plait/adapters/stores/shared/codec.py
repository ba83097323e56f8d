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
from plait.domain.jsontext import flat_encoder
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
    "Unusual",
    "assistant_extra",
    "assistant_extra_json",
    "check_schema",
    "decode",
    "dumps",
    "dumps_flat",
    "execution_from_dict",
    "execution_json",
    "execution_to_dict",
    "loads",
    "message_from_dict",
    "message_to_dict",
    "run_from_dict",
    "run_to_dict",
    "session_from_dict",
    "session_to_dict",
    "time_or_null",
    "tool_result_extra",
]

SCHEMA_VERSION = 1

dumps: Callable[[Any], str] = json.JSONEncoder(
    ensure_ascii=False, separators=(",", ":"), allow_nan=False
).encode
loads: Callable[[str], Any] = json.JSONDecoder().decode
dumps_flat: Callable[[Any], str] = flat_encoder(allow_nan=False)
""":data:`dumps` for a shape plait builds from scalars (an execution record, a run's
usage): the same text, without a cycle check or an encoder made per call."""

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
    except (LookupError, TypeError, ValueError, AttributeError, PlaitError) as error:
        raise CorruptStoreError(f"{what} is malformed: {type(error).__name__}: {error}") from error


# --- messages -----------------------------------------------------------------------------


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


def artifact_from_dict(data: dict[str, Any]) -> ArtifactRef:
    return ArtifactRef(
        id=data["id"], sha256=data["sha256"], size=int(data["size"]), media_type=data["media_type"]
    )


def assistant_extra(message: AssistantMessage) -> dict[str, Any] | None:
    """The sparse part of an assistant message: tool calls, usage, vendor state, the
    typed answer's value."""
    if (
        not message.tool_calls
        and message.usage is None
        and message.vendor_state is None
        and message.output is None
    ):
        return None
    extra: dict[str, Any] = {}
    if message.tool_calls:
        extra["tool_calls"] = [[c.id, c.name, c.arguments_json] for c in message.tool_calls]
    if message.usage is not None:
        extra["usage"] = _usage_to_dict(message.usage)
    if message.vendor_state is not None:
        extra["vendor_state"] = _vendor_to_dict(message.vendor_state)
    if message.output is not None:
        extra["output"] = message.output
    return extra


def assistant_extra_json(message: AssistantMessage) -> str | None:
    """``dumps(assistant_extra(message))`` (None when there is none): the same text,
    written from a template when the extra holds only tool calls and usage of plain
    strings and integers (every step's assistant message; 0.7 against 2.4 us for one
    call). Anything else takes the general path, which also raises what it raises."""
    if message.vendor_state is not None or message.output is not None:
        return _general_extra(message)
    parts: list[str] = []
    calls = message.tool_calls
    if calls:
        try:
            written = [
                f"[{_quote(c.id)},{_quote(c.name)},{_quote(c.arguments_json)}]" for c in calls
            ]
        except TypeError:  # not a plain string: the general path says what
            return _general_extra(message)
        parts.append(f'"tool_calls":[{",".join(written)}]')
    usage = message.usage
    if usage is not None:
        counts = (
            usage.input_tokens,
            usage.output_tokens,
            usage.cached_input_tokens,
            usage.reasoning_tokens,
        )
        if any(type(n) is not int for n in counts):
            return _general_extra(message)
        into, out, cached, reasoning = counts
        text = f'"usage":{{"input_tokens":{into},"output_tokens":{out}'
        if cached:
            text += f',"cached_input_tokens":{cached}'
        if reasoning:
            text += f',"reasoning_tokens":{reasoning}'
        parts.append(text + "}")
    return "{" + ",".join(parts) + "}" if parts else None


def _general_extra(message: AssistantMessage) -> str | None:
    extra = assistant_extra(message)
    return None if extra is None else dumps(extra)


def tool_result_extra(message: ToolResultMessage) -> dict[str, Any] | None:
    """The sparse part of a tool result: reason and artifact reference."""
    result = message.result
    if result.reason is None and result.artifact is None:
        return None
    extra: dict[str, Any] = {}
    if result.reason is not None:
        extra["reason"] = result.reason
    if result.artifact is not None:
        extra["artifact"] = _artifact_to_dict(result.artifact)
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
        stored_artifact = extra.get("artifact")
        artifact = None if stored_artifact is None else artifact_from_dict(stored_artifact)
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


def message_to_dict(message: Message) -> dict[str, Any]:
    data: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "kind": message.kind,
        "id": message.id,
    }
    if isinstance(message, UserMessage):
        data["text"] = message.text
    elif isinstance(message, AssistantMessage):
        data["text"] = message.text
        data["step"] = message.step
        if message.model is not None:
            data["model"] = message.model
        extra = assistant_extra(message)
        if extra is not None:
            data.update(extra)
    else:
        data["step"] = message.step
        data["tool_name"] = message.tool_name
        data["call_id"] = message.result.call_id
        data["status"] = message.result.status.value
        data["content"] = message.result.content
        extra = tool_result_extra(message)
        if extra is not None:
            data.update(extra)
    data["created_at"] = message.created_at
    if message.run_id is not None:
        data["run_id"] = message.run_id
    return data


def _message_from_dict(data: dict[str, Any]) -> Message:
    kind = data["kind"]
    if kind == "user":
        return UserMessage(
            id=data["id"],
            text=data["text"],
            created_at=data["created_at"],
            run_id=data.get("run_id"),
        )
    if kind == "assistant":
        return assistant_from_parts(
            id=data["id"],
            text=data["text"],
            created_at=data["created_at"],
            run_id=data.get("run_id"),
            step=data["step"],
            model=data.get("model"),
            extra=data,
        )
    if kind == "tool_result":
        return tool_result_from_parts(
            id=data["id"],
            text=data["content"],
            created_at=data["created_at"],
            run_id=data.get("run_id"),
            step=data["step"],
            call_id=data["call_id"],
            tool_name=data["tool_name"],
            status=data["status"],
            extra=data,
        )
    raise ValueError(f"unknown message kind {kind!r}")


def message_from_dict(data: Any) -> Message:
    return decode(_message_from_dict, data, "message")


# --- sessions -----------------------------------------------------------------------------


def session_to_dict(session: Session) -> dict[str, Any]:
    return {
        "schema_version": SCHEMA_VERSION,
        "id": session.id,
        "created_at": session.created_at,
        "owner": session.owner,
        "workspace": session.workspace,
        "version": session.version,
        "active_run_id": session.active_run_id,
        "fork_origin": None
        if session.fork_origin is None
        else {
            "parent_session_id": session.fork_origin.parent_session_id,
            "fork_point_message_id": session.fork_origin.fork_point_message_id,
        },
        "title": session.title,
        "model": session.model,
    }


def _session_from_dict(data: dict[str, Any]) -> Session:
    fork = data["fork_origin"]
    return Session(
        id=data["id"],
        created_at=data["created_at"],
        owner=data["owner"],
        workspace=data["workspace"],
        version=data["version"],
        active_run_id=data["active_run_id"],
        fork_origin=None
        if fork is None
        else ForkOrigin(
            parent_session_id=fork["parent_session_id"],
            fork_point_message_id=fork["fork_point_message_id"],
        ),
        title=data["title"],
        model=data.get("model"),
    )


def session_from_dict(data: Any) -> Session:
    return decode(_session_from_dict, data, "session")


# --- runs ---------------------------------------------------------------------------------

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


def run_to_dict(run: Run) -> dict[str, Any]:
    return {
        "schema_version": SCHEMA_VERSION,
        "id": run.id,
        "session_id": run.session_id,
        "status": run.status.value,
        "budget": {f: getattr(run.budget, f) for f in _BUDGET_FIELDS},
        "started_at": run.started_at,
        "model": run.model,
        "usage": {f: getattr(run.usage, f) for f in _USAGE_FIELDS},
        "ended_at": run.ended_at,
        "error": None
        if run.error is None
        else {"code": run.error.code, "message": run.error.message},
        "lease": None
        if run.lease is None
        else {"owner": run.lease.owner, "expires_at": run.lease.expires_at},
        "cancel_requested": run.cancel_requested,
        "lease_token": run.lease_token,
        "model_spec": run.model_spec,
        "deadline_at": run.deadline_at,
        "policy": run.policy,
        "mcp_servers": None if run.mcp_servers is None else list(run.mcp_servers),
        "trace_context": run.trace_context,
        "output_schema": None
        if run.output_schema is None
        else {"name": run.output_schema.name, "schema": run.output_schema.schema()},
        "parent": None
        if run.parent is None
        else {
            "session_id": run.parent.session_id,
            "run_id": run.parent.run_id,
            "call_id": run.parent.call_id,
            "agent": run.parent.agent,
        },
    }


def _run_from_dict(data: dict[str, Any]) -> Run:
    budget = data["budget"]
    usage = data["usage"]
    error = data["error"]
    lease = data["lease"]
    return Run(
        id=data["id"],
        session_id=data["session_id"],
        status=RunStatus(data["status"]),
        budget=Budget(
            **{f: budget[f] for f in _BUDGET_FIELDS if f in budget or f not in _NEW_BUDGET}
        ),
        started_at=data["started_at"],
        model=data["model"],
        usage=RunUsage(**{f: usage[f] for f in _USAGE_FIELDS}),
        ended_at=data["ended_at"],
        error=None if error is None else RunError(code=error["code"], message=error["message"]),
        lease=None
        if lease is None
        else Lease(owner=lease["owner"], expires_at=lease["expires_at"]),
        cancel_requested=bool(data["cancel_requested"]),
        lease_token=int(data.get("lease_token", 0)),
        model_spec=data.get("model_spec"),
        deadline_at=data.get("deadline_at"),
        policy=data.get("policy"),
        mcp_servers=None if data.get("mcp_servers") is None else tuple(data["mcp_servers"]),
        trace_context=data.get("trace_context"),
        output_schema=_output_schema(data.get("output_schema")),
        parent=None if data.get("parent") is None else ParentCall(**data["parent"]),
    )


def _output_schema(data: dict[str, Any] | None) -> OutputSchema | None:
    return None if data is None else OutputSchema.create(data["schema"], name=data["name"])


def run_from_dict(data: Any) -> Run:
    return decode(_run_from_dict, data, "run")


# --- execution records --------------------------------------------------------------------


def execution_to_dict(record: ExecutionRecord) -> dict[str, Any]:
    # str() of a StrEnum member is its value, without ``.value``'s Python-level property
    # call (two records are written at every step).
    status = record.result_status
    return {
        "schema_version": SCHEMA_VERSION,
        "session_id": record.session_id,
        "run_id": record.run_id,
        "call_id": record.call_id,
        "tool_name": record.tool_name,
        "effect": str(record.effect),
        "args_digest": record.args_digest,
        "idempotency_key": record.idempotency_key,
        "state": str(record.state),
        "requested_at": record.requested_at,
        "reviewed_at": record.reviewed_at,
        "started_at": record.started_at,
        "settled_at": record.settled_at,
        "result_status": None if status is None else str(status),
        "decision": record.decision,
        "decided_by": record.decided_by,
        "decision_reason": record.decision_reason,
        "note": record.note,
    }


class Unusual(Exception):
    """A value a template (:func:`execution_json`, the run's ``data``) does not write
    itself."""


_quote = json.encoder.encode_basestring  # what dumps_flat writes a string with
_QUOTED = {
    member: _quote(member.value)
    for enum in (EffectClass, ExecutionState, ToolStatus)
    for member in enum
}


def _text_or_null(value: str | None) -> str:
    if value is None:
        return "null"
    if type(value) is str:
        return _quote(value)
    raise Unusual


_TIMES: dict[float, str] = {}
"""The text of the last times written: a step's two records repeat some (the settled one
carries the request time written with the request a step before, and is reviewed and
started at one moment), and ``float.__repr__`` of a timestamp (its shortest digits that
read back the same) costs ~0.4 us, ~7,000 instructions. Kept for a few; 0.0 never (-0.0
is an equal key with another text)."""
_TIMES_KEPT = 16


def time_or_null(value: float | None) -> str:
    if value is None:
        return "null"
    if type(value) is float:
        text = _TIMES.get(value)
        if text is not None:
            return text
        if value - value == 0.0:  # finite (NaN and infinities: not)
            text = float.__repr__(value)
            if value:
                if len(_TIMES) >= _TIMES_KEPT:
                    _TIMES.clear()
                _TIMES[value] = text
            return text
    raise Unusual


def execution_json(record: ExecutionRecord) -> str:
    """``dumps_flat(execution_to_dict(record))``, the same text, written from a template
    instead of through a dict (two records are written at every step; this is about half
    the cost). Any value the template does not write itself (not a plain string, float or
    None) takes the general path, which also raises what it raises."""
    try:
        status = record.result_status
        return (
            f'{{"schema_version":{SCHEMA_VERSION},"session_id":{_quote(record.session_id)},'
            f'"run_id":{_quote(record.run_id)},"call_id":{_quote(record.call_id)},'
            f'"tool_name":{_quote(record.tool_name)},"effect":{_QUOTED[record.effect]},'
            f'"args_digest":{_quote(record.args_digest)},'
            f'"idempotency_key":{_quote(record.idempotency_key)},'
            f'"state":{_QUOTED[record.state]},'
            f'"requested_at":{time_or_null(record.requested_at)},'
            f'"reviewed_at":{time_or_null(record.reviewed_at)},'
            f'"started_at":{time_or_null(record.started_at)},'
            f'"settled_at":{time_or_null(record.settled_at)},'
            f'"result_status":{"null" if status is None else _QUOTED[status]},'
            f'"decision":{_text_or_null(record.decision)},'
            f'"decided_by":{_text_or_null(record.decided_by)},'
            f'"decision_reason":{_text_or_null(record.decision_reason)},'
            f'"note":{_text_or_null(record.note)}}}'
        )
    except (Unusual, LookupError, TypeError):
        return dumps_flat(execution_to_dict(record))


def _execution_from_dict(data: dict[str, Any]) -> ExecutionRecord:
    status = data["result_status"]
    return ExecutionRecord(
        session_id=data["session_id"],
        run_id=data["run_id"],
        call_id=data["call_id"],
        tool_name=data["tool_name"],
        effect=EffectClass(data["effect"]),
        args_digest=data["args_digest"],
        idempotency_key=data["idempotency_key"],
        state=ExecutionState(data["state"]),
        requested_at=data["requested_at"],
        reviewed_at=data["reviewed_at"],
        started_at=data["started_at"],
        settled_at=data["settled_at"],
        result_status=None if status is None else ToolStatus(status),
        decision=data.get("decision"),
        decided_by=data.get("decided_by"),
        decision_reason=data["decision_reason"],
        note=data.get("note"),
    )


def execution_from_dict(data: Any) -> ExecutionRecord:
    return decode(_execution_from_dict, data, "execution record")
