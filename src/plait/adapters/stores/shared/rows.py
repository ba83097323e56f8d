"""Rows of the relational stores (SQLite and PostgreSQL lay out sessions, runs, execution
records and messages in the same columns): the encoders, and the message decoder on the
resume hot path.

Loading a 5,000-message session must take a few milliseconds, and at that scale the cost
is building Python objects. Rows were validated when they were written, so the decoder
builds the frozen dataclasses through their slot descriptors instead of ``__init__``
(about 3x cheaper: no keyword parsing, no ``__post_init__`` re-validation). Each builder
is used only when its class has exactly the fields it sets; if the domain grows a field,
:data:`FAST` turns False and the decoder falls back to the ordinary constructors, so it
stays correct (a test asserts :data:`FAST` so the builders get updated).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Iterable
from typing import Any

from plait.adapters.stores.shared import codec
from plait.adapters.stores.shared.codec import (
    SCHEMA_VERSION,
    artifact_from_dict,
    assistant_extra,
    dumps,
    dumps_flat,
    loads,
    message_from_dict,
    tool_result_extra,
)
from plait.domain.errors import CorruptStoreError, PlaitError
from plait.domain.messages import (
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
from plait.domain.runs import Run
from plait.domain.session import ExecutionRecord, ForkOrigin, Session, StoredMessage

__all__ = [
    "FAST",
    "RUN_COLUMNS",
    "decode_history",
    "decode_messages",
    "execution_row",
    "json_value",
    "message_row",
    "run_data",
    "run_from_row",
    "session_from_row",
    "session_row",
]


# --- sessions, runs, execution records ----------------------------------------------------


def session_row(session: Session) -> tuple[Any, ...]:
    """The ``sessions`` row; the version is derived from the messages, never stored."""
    fork = session.fork_origin
    return (
        session.id,
        session.created_at,
        session.owner,
        session.workspace,
        session.active_run_id,
        None if fork is None else fork.parent_session_id,
        None if fork is None else fork.fork_point_message_id,
        session.title,
        session.model,
    )


def session_from_row(row: tuple[Any, ...]) -> Session:
    """A ``sessions`` row as read (the version in fifth place); ``model`` last, absent
    from rows read by the PostgreSQL claim function (a worker needs the run's model)."""
    sid, created_at, owner, workspace, version, active, parent, point, title = row[:9]
    model = row[9] if len(row) > 9 else None
    return Session(
        id=sid,
        created_at=created_at,
        owner=owner,
        workspace=workspace,
        version=version,
        active_run_id=active,
        fork_origin=None
        if parent is None
        else ForkOrigin(parent_session_id=parent, fork_point_message_id=point),
        title=title,
        model=model,
    )


RUN_COLUMNS = (
    "id",
    "session_id",
    "status",
    "started_at",
    "lease",
    "cancel_requested",
    "lease_token",
)
"""The run's fields kept in columns of their own, not in its ``data``."""
_RUN_FIXED = (
    "budget",
    "model",
    "model_spec",
    "deadline_at",
    "policy",
    "mcp_servers",
    "output_schema",
    "parent",
)
"""The fields of a run's ``data`` that no step changes."""
_fixed: tuple[tuple[object, ...], str] = ((), "")
"""The last run's fixed fields (the frozen values themselves) and their JSON."""


def run_data(run: Run) -> str:
    """The run's ``data`` column: every field of :func:`codec.run_to_dict` but its
    :data:`RUN_COLUMNS`. A run is written at every step with the same fixed fields (the
    same frozen objects: ``replace`` keeps them), so their JSON is made once and reused
    while they are the same objects."""
    global _fixed
    key = (
        run.budget,
        run.model,
        run.model_spec,
        run.deadline_at,
        run.policy,
        run.mcp_servers,
        run.output_schema,
        run.parent,
    )
    known, fixed = _fixed
    if known != key:  # the same objects compare equal at once (frozen: so do equal ones)
        data = codec.run_to_dict(run)
        fixed = dumps({name: data[name] for name in _RUN_FIXED})[1:-1]
        _fixed = (key, fixed)
    usage = run.usage
    error = run.error
    changing = dumps_flat(
        {
            "schema_version": SCHEMA_VERSION,
            "usage": {
                "steps": usage.steps,
                "model_calls": usage.model_calls,
                "corrections": usage.corrections,
                "tool_calls": usage.tool_calls,
                "input_tokens": usage.input_tokens,
                "output_tokens": usage.output_tokens,
            },
            "ended_at": run.ended_at,
            "error": None if error is None else {"code": error.code, "message": error.message},
            "trace_context": run.trace_context,
        }
    )
    return f"{changing[:-1]},{fixed}}}"


def run_from_row(row: tuple[Any, ...]) -> Run:
    rid, sid, status, started_at, owner, expires_at, cancel, data, token = row
    try:
        decoded = loads(data)
    except ValueError as error:
        raise CorruptStoreError(f"run {rid!r}: data is not JSON: {error}", run_id=rid) from error
    if isinstance(decoded, dict):
        decoded.update(
            id=rid,
            session_id=sid,
            status=status,
            started_at=started_at,
            lease=None if owner is None else {"owner": owner, "expires_at": expires_at},
            cancel_requested=bool(cancel),
            lease_token=token,
        )
    return codec.run_from_dict(decoded)


def execution_row(record: ExecutionRecord) -> tuple[Any, ...]:
    return (
        record.session_id,
        record.run_id,
        record.call_id,
        str(record.state),  # its value (a StrEnum), without .value's property call
        record.args_digest,
        codec.execution_json(record),
    )


def json_value(data: str, what: str) -> Any:
    try:
        return loads(data)
    except ValueError as error:
        raise CorruptStoreError(f"{what} is not JSON: {error}") from error


# --- messages -----------------------------------------------------------------------------


def message_row(message: Message) -> tuple[Any, ...]:
    """``(id, kind, text, created_at, run_id, step, call_id, name, status, extra,
    schema_version)``: the ``messages`` table of either store."""
    if isinstance(message, AssistantMessage):
        extra = assistant_extra(message)
        return (
            message.id,
            "assistant",
            message.text,
            message.created_at,
            message.run_id,
            message.step,
            None,
            message.model,
            None,
            None if extra is None else dumps(extra),
            SCHEMA_VERSION,
        )
    if isinstance(message, ToolResultMessage):
        result = message.result
        extra = tool_result_extra(message)
        return (
            message.id,
            "tool_result",
            result.content,
            message.created_at,
            message.run_id,
            message.step,
            result.call_id,
            message.tool_name,
            str(result.status),  # its value (a StrEnum), as above
            None if extra is None else dumps(extra),
            SCHEMA_VERSION,
        )
    return (
        message.id,
        "user",
        message.text,
        message.created_at,
        message.run_id,
        None,
        None,
        None,
        None,
        None,
        SCHEMA_VERSION,
    )


# --- builders -----------------------------------------------------------------------------

_new = object.__new__


def _setters(cls: type, names: tuple[str, ...]) -> tuple[Callable[[Any, Any], None], ...] | None:
    """Slot setters for ``names`` if they are exactly the fields of ``cls`` set by its
    ``__init__``, else None (a cache field such as ``ToolCall._decoded`` stays unset)."""
    if {f.name for f in dataclasses.fields(cls) if f.init} != set(names):
        return None
    try:
        return tuple(cls.__dict__[n].__set__ for n in names)
    except (KeyError, AttributeError):
        return None


_USER = _setters(UserMessage, ("id", "text", "created_at", "run_id", "kind"))
_ASSISTANT = _setters(
    AssistantMessage,
    (
        "id",
        "text",
        "created_at",
        "tool_calls",
        "run_id",
        "step",
        "model",
        "usage",
        "vendor_state",
        "output",
        "kind",
    ),
)
_TOOL_MSG = _setters(
    ToolResultMessage, ("id", "tool_name", "result", "created_at", "run_id", "step", "kind")
)
_RESULT = _setters(ToolResult, ("call_id", "status", "content", "reason", "artifact"))
_CALL = _setters(ToolCall, ("id", "name", "arguments_json"))
_USAGE = _setters(
    Usage, ("input_tokens", "output_tokens", "cached_input_tokens", "reasoning_tokens")
)
_STORED = _setters(StoredMessage, ("seq", "message"))

FAST = False
"""True when every builder matches its class (the normal case)."""

if _USER and _ASSISTANT and _TOOL_MSG and _RESULT and _CALL and _USAGE and _STORED:
    FAST = True
    _u_id, _u_text, _u_at, _u_run, _u_kind = _USER
    (
        _a_id,
        _a_text,
        _a_at,
        _a_calls,
        _a_run,
        _a_step,
        _a_model,
        _a_usage,
        _a_vs,
        _a_out,
        _a_kind,
    ) = _ASSISTANT
    _t_id, _t_name, _t_result, _t_at, _t_run, _t_step, _t_kind = _TOOL_MSG
    _r_call, _r_status, _r_content, _r_reason, _r_artifact = _RESULT
    _c_id, _c_name, _c_args = _CALL
    _g_in, _g_out, _g_cached, _g_reasoning = _USAGE
    _s_seq, _s_msg = _STORED

    def _user(id: str, text: str, at: float, run_id: str | None) -> UserMessage:
        made = _new(UserMessage)
        _u_id(made, id)
        _u_text(made, text)
        _u_at(made, at)
        _u_run(made, run_id)
        _u_kind(made, "user")
        return made

    def _assistant(
        id: str,
        text: str,
        at: float,
        calls: tuple[ToolCall, ...],
        run_id: str | None,
        step: int,
        model: str | None,
        usage: Usage | None,
        vendor_state: VendorState | None,
        output: Any = None,
    ) -> AssistantMessage:
        made = _new(AssistantMessage)
        _a_id(made, id)
        _a_text(made, text)
        _a_at(made, at)
        _a_calls(made, calls)
        _a_run(made, run_id)
        _a_step(made, step)
        _a_model(made, model)
        _a_usage(made, usage)
        _a_vs(made, vendor_state)
        _a_out(made, output)
        _a_kind(made, "assistant")
        return made

    def _tool_message(
        id: str, tool_name: str, result: ToolResult, at: float, run_id: str | None, step: int
    ) -> ToolResultMessage:
        made = _new(ToolResultMessage)
        _t_id(made, id)
        _t_name(made, tool_name)
        _t_result(made, result)
        _t_at(made, at)
        _t_run(made, run_id)
        _t_step(made, step)
        _t_kind(made, "tool_result")
        return made

    def _result(
        call_id: str, status: ToolStatus, content: str, reason: Any, artifact: Any
    ) -> ToolResult:
        made = _new(ToolResult)
        _r_call(made, call_id)
        _r_status(made, status)
        _r_content(made, content)
        _r_reason(made, reason)
        _r_artifact(made, artifact)
        return made

    def _call(id: str, name: str, arguments_json: str) -> ToolCall:
        made = _new(ToolCall)
        _c_id(made, id)
        _c_name(made, name)
        _c_args(made, arguments_json)
        return made

    def _usage(input_tokens: int, output_tokens: int, cached: int, reasoning: int) -> Usage:
        made = _new(Usage)
        _g_in(made, input_tokens)
        _g_out(made, output_tokens)
        _g_cached(made, cached)
        _g_reasoning(made, reasoning)
        return made

    def _stored(seq: int, message: Message) -> StoredMessage:
        made = _new(StoredMessage)
        _s_seq(made, seq)
        _s_msg(made, message)
        return made

else:  # pragma: no cover - only when the domain changed under us

    def _user(id: str, text: str, at: float, run_id: str | None) -> UserMessage:
        return UserMessage(id=id, text=text, created_at=at, run_id=run_id)

    def _assistant(
        id: str,
        text: str,
        at: float,
        calls: tuple[ToolCall, ...],
        run_id: str | None,
        step: int,
        model: str | None,
        usage: Usage | None,
        vendor_state: VendorState | None,
        output: Any = None,
    ) -> AssistantMessage:
        return AssistantMessage(
            id=id,
            text=text,
            created_at=at,
            tool_calls=calls,
            run_id=run_id,
            step=step,
            model=model,
            usage=usage,
            vendor_state=vendor_state,
            output=output,
        )

    def _tool_message(
        id: str, tool_name: str, result: ToolResult, at: float, run_id: str | None, step: int
    ) -> ToolResultMessage:
        return ToolResultMessage(
            id=id, tool_name=tool_name, result=result, created_at=at, run_id=run_id, step=step
        )

    def _result(
        call_id: str, status: ToolStatus, content: str, reason: Any, artifact: Any
    ) -> ToolResult:
        return ToolResult(
            call_id=call_id, status=status, content=content, reason=reason, artifact=artifact
        )

    def _call(id: str, name: str, arguments_json: str) -> ToolCall:
        return ToolCall(id=id, name=name, arguments_json=arguments_json)

    def _usage(input_tokens: int, output_tokens: int, cached: int, reasoning: int) -> Usage:
        return Usage(
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            cached_input_tokens=cached,
            reasoning_tokens=reasoning,
        )

    def _stored(seq: int, message: Message) -> StoredMessage:
        return StoredMessage(seq, message)


# --- the decoder --------------------------------------------------------------------------

_STATUS = {s.value: s for s in ToolStatus}
_raw_decode = json.JSONDecoder().raw_decode


def _assistant_with_extra(
    mid: str, text: str, at: float, run_id: str | None, step: int, name: Any, extra: str
) -> AssistantMessage:
    """An assistant row whose ``extra`` JSON holds tool calls, usage or vendor state."""
    decoded, end = _raw_decode(extra)
    if end != len(extra):
        raise ValueError("trailing data after the extra JSON")
    calls = decoded.get("tool_calls")
    usage_data = decoded.get("usage")
    vs = decoded.get("vendor_state")
    call = _call
    if not calls:
        tool_calls: tuple[ToolCall, ...] = ()
    elif len(calls) == 1:
        first_call = calls[0]
        tool_calls = (call(first_call[0], first_call[1], first_call[2]),)
    else:
        tool_calls = tuple(
            [call(first_call[0], first_call[1], first_call[2]) for first_call in calls]
        )
    usage = (
        None
        if usage_data is None
        else _usage(
            usage_data["input_tokens"],
            usage_data["output_tokens"],
            usage_data.get("cached_input_tokens", 0),
            usage_data.get("reasoning_tokens", 0),
        )
    )
    vendor = (
        None
        if vs is None
        else VendorState(vendor=vs["vendor"], version=vs["version"], data=vs["data"])
    )
    return _assistant(
        mid, text, at, tool_calls, run_id, step, name, usage, vendor, decoded.get("output")
    )


def decode_messages(rows: Iterable[Any]) -> list[StoredMessage]:
    """Rows of ``(seq, kind, id, text, created_at, run_id, step, call_id, name, status,
    extra, schema_version)`` to stored messages, in one pass."""
    stored: list[StoredMessage] = _decode(rows, True)
    return stored


def decode_history(rows: Iterable[Any]) -> list[Message]:
    """The same rows to their messages alone (a run's history needs no seqs: one object
    less per message)."""
    messages: list[Message] = _decode(rows, False)
    return messages


def _decode(rows: Iterable[Any], with_seq: bool) -> list[Any]:
    out: list[Any] = []
    append = out.append
    user, assistant, tool_message, result, stored = (
        _user,
        _assistant,
        _tool_message,
        _result,
        _stored,
    )
    status_of, raw, artifact_of, current = _STATUS, _raw_decode, artifact_from_dict, SCHEMA_VERSION
    mid: Any = None
    msg: Message
    try:
        for seq, kind, mid, text, at, run_id, step, call_id, name, status, extra, sv in rows:
            if sv != current:
                # No older row shape exists yet; this raises with a clear message.
                msg = message_from_dict({"schema_version": sv, "kind": kind, "id": mid})
            elif kind == "tool_result":
                if extra is None:
                    res = result(call_id, status_of[status], text, None, None)
                else:
                    decoded, end = raw(extra)
                    if end != len(extra):
                        raise ValueError("trailing data after the extra JSON")
                    artifact = decoded.get("artifact")
                    res = result(
                        call_id,
                        status_of[status],
                        text,
                        decoded.get("reason"),
                        None if artifact is None else artifact_of(artifact),
                    )
                msg = tool_message(mid, name, res, at, run_id, step)
            elif kind == "assistant":
                if extra is None:
                    msg = assistant(mid, text, at, (), run_id, step, name, None, None)
                else:
                    msg = _assistant_with_extra(mid, text, at, run_id, step, name, extra)
            elif kind == "user":
                msg = user(mid, text, at, run_id)
            else:
                raise ValueError(f"unknown message kind {kind!r}")
            append(stored(seq, msg) if with_seq else msg)
    except CorruptStoreError:
        raise
    except (LookupError, TypeError, ValueError, AttributeError, PlaitError) as error:
        raise CorruptStoreError(
            f"stored message {mid!r} is malformed: {type(error).__name__}: {error}",
            message_id=str(mid),
        ) from error
    return out
