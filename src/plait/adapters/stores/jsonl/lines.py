"""The lines of a JSONL session file: one :class:`~._state.Change` written as one line, and
a persisted line replayed into the session's state on load."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from plait.adapters.stores.jsonl.files import Tracked
from plait.adapters.stores.shared import codec
from plait.adapters.stores.shared.state import Change, SessionState
from plait.domain.errors import CorruptStoreError
from plait.domain.session import Session, StoredMessage

__all__ = ["change_line", "create_line", "replay"]


def create_line(session: Session) -> dict[str, Any]:
    line: dict[str, Any] = {"schema_version": codec.SCHEMA_VERSION, "op": "create"}
    line["session"] = codec.session_to_dict(session)
    return line


def change_line(op: str, change: Change) -> dict[str, Any]:
    line: dict[str, Any] = {"schema_version": codec.SCHEMA_VERSION, "op": op}
    if change.messages:
        line["messages"] = [
            {"seq": sm.seq, "message": codec.message_to_dict(sm.message)} for sm in change.messages
        ]
    if change.run is not None:
        line["run"] = codec.run_to_dict(change.run)
    if change.executions:
        line["executions"] = [codec.execution_to_dict(e) for e in change.executions]
    if change.set_active:
        line["active_run_id"] = change.active_run_id
    return line


def replay(tracked: Tracked, obj: dict[str, Any], path: Path, line_no: int) -> None:
    """Apply one persisted line to ``tracked.state``."""
    try:
        obj = codec.check_schema(obj, "jsonl line")
        op = obj["op"]
        if op == "create":
            if tracked.state is not None:
                raise ValueError("a second 'create' line")
            tracked.state = SessionState(codec.session_from_dict(obj["session"]))
            return
        state = tracked.state
        if state is None:
            raise ValueError(f"a {op!r} line before the 'create' line")
        messages = tuple(
            StoredMessage(x["seq"], codec.message_from_dict(x["message"]))
            for x in obj.get("messages", ())
        )
        for index, sm in enumerate(messages):
            if sm.seq != state.session.version + 1 + index:
                raise ValueError(f"message seq {sm.seq} does not follow {state.session.version}")
        run = obj.get("run")
        active = "active_run_id" in obj
        state.apply(
            Change(
                messages=messages,
                run=None if run is None else codec.run_from_dict(run),
                executions=tuple(codec.execution_from_dict(e) for e in obj.get("executions", ())),
                set_active=active,
                active_run_id=obj["active_run_id"] if active else None,
            )
        )
    except (CorruptStoreError, ValueError, KeyError, TypeError) as error:
        raise CorruptStoreError(
            f"{path}, line {line_no}: {error}; the file was not changed",
            path=str(path),
            line=line_no,
        ) from error
