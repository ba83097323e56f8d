"""Rows of the relational stores (SQLite and PostgreSQL lay out sessions, runs, execution
records and messages in the same columns): the encoders, and the message decoder on the
resume hot path.

Loading a 5,000-message session must take a few milliseconds, and at that scale the cost
is building Python objects. Rows were validated when they were written, so the decoder
builds the frozen records with :func:`plait.domain.record.maker` instead of ``__init__``
(plain stores in a class of the same layout, then the record's class: 220 against 560 ns
for an assistant message through the slots' descriptors, no keyword parsing, no
``__post_init__`` re-validation). Each builder
is used only when its class has exactly the fields it sets; if the domain grows a field,
:data:`FAST` turns False and the decoder falls back to the ordinary constructors, so it
stays correct (a test asserts :data:`FAST` so the builders get updated).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any

from plait.adapters.stores.shared import codec
from plait.adapters.stores.shared.codec import (
    SCHEMA_VERSION,
    artifact_from_dict,
    assistant_extra_json,
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
from plait.domain.record import maker
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
    return f"{_changing(run)[:-1]},{fixed}}}"


def _changing(run: Run) -> str:
    """The fields of a run's ``data`` a step changes: :func:`_changing_general`'s text,
    written from a template while the counts are plain integers, the end a finite time or
    none, and there is no error or trace context (every step of a run: the C encoder
    took ~7 us of a W1 step here, the template ~3). Anything else takes the general path,
    which also raises what it raises."""
    counts = run.usage.counts()
    if run.error is None and run.trace_context is None and tuple(map(type, counts)) == _INTS:
        try:
            ended = codec.time_or_null(run.ended_at)
        except codec.Unusual:
            return _changing_general(run)
        steps, calls, corrections, tools, into, out = counts
        return (
            f'{{"schema_version":{SCHEMA_VERSION},"usage":{{"steps":{steps},'
            f'"model_calls":{calls},"corrections":{corrections},"tool_calls":{tools},'
            f'"input_tokens":{into},"output_tokens":{out}}},"ended_at":{ended},'
            '"error":null,"trace_context":null}'
        )
    return _changing_general(run)


_INTS = (int,) * 6


def _changing_general(run: Run) -> str:
    usage = run.usage
    error = run.error
    return dumps_flat(
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
            assistant_extra_json(message),
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

# Records made from the rows the store wrote (already checked when they were written): each
# filled in by plain stores in a class of its layout, then given its class (see
# plait.domain.record.maker), without its __post_init__ checks.
_USER = maker(UserMessage, ("id", "text", "created_at", "run_id"), kind="user")
_ASSISTANT = maker(
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
    ),
    kind="assistant",
)
_TOOL_MSG = maker(
    ToolResultMessage,
    ("id", "tool_name", "result", "created_at", "run_id", "step"),
    kind="tool_result",
)
_RESULT = maker(ToolResult, ("call_id", "status", "content", "reason", "artifact"))
_CALL = maker(ToolCall, ("id", "name", "arguments_json"))  # its argument cache: None
_USAGE = maker(Usage, ("input_tokens", "output_tokens", "cached_input_tokens", "reasoning_tokens"))
_STORED = maker(StoredMessage, ("seq", "message"))

FAST = False
"""True when every builder matches its class (the normal case)."""

if _USER and _ASSISTANT and _TOOL_MSG and _RESULT and _CALL and _USAGE and _STORED:
    FAST = True
    _user: Callable[[str, str, float, str | None], UserMessage] = _USER
    _assistant: Callable[
        [
            str,
            str,
            float,
            tuple[ToolCall, ...],
            str | None,
            int,
            str | None,
            Usage | None,
            VendorState | None,
            Any,
        ],
        AssistantMessage,
    ] = _ASSISTANT
    _tool_message: Callable[[str, str, ToolResult, float, str | None, int], ToolResultMessage] = (
        _TOOL_MSG
    )
    _result: Callable[[str, ToolStatus, str, Any, Any], ToolResult] = _RESULT
    _call: Callable[[str, str, str], ToolCall] = _CALL
    _usage: Callable[[int, int, int, int], Usage] = _USAGE
    _stored: Callable[[int, Message], StoredMessage] = _STORED

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
        output: Any,
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
                    msg = assistant(mid, text, at, (), run_id, step, name, None, None, None)
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
