"""Loop events -> persisted run events (the payloads SSE clients receive).

Payloads use the one public JSON shape of messages and runs."""

from __future__ import annotations

import json

from plait.adapters.shapes import compaction_event_json, iso, message_json, run_json
from plait.application.events import (
    CompactionEvent,
    MessageSaved,
    ModelCallStarted,
    RunEnded,
    RunEvent,
    RunStarted,
    ToolDecided,
    ToolStarted,
)
from plait.domain.messages import AssistantMessage, ToolResultMessage
from plait.domain.service import EventType, NewRunEvent, RunEventRecord

__all__ = ["encode_event", "sse_frame", "sse_payload"]


def encode_event(event: RunEvent, at: float) -> list[NewRunEvent]:
    """The events one loop event becomes (a saved assistant message with calls also
    yields one ``tool_call_requested`` per call)."""
    if isinstance(event, RunStarted):
        return [NewRunEvent(type=EventType.RUN_STARTED, at=at, data={"run": run_json(event.run)})]
    if isinstance(event, ModelCallStarted):
        data = {"step": event.step, "attempt": event.attempt}
        return [NewRunEvent(type=EventType.STEP_STARTED, at=at, data=data)]
    if isinstance(event, ToolDecided):
        decided = {
            "call_id": event.call.id,
            "name": event.call.name,
            "verdict": event.verdict,
            "decided_by": event.decided_by,
            "reason": event.reason,
        }
        return [NewRunEvent(type=EventType.DECISION, at=at, data=decided)]
    if isinstance(event, ToolStarted):
        call = {"call_id": event.call.id, "name": event.call.name}
        return [NewRunEvent(type=EventType.TOOL_STARTED, at=at, data=call)]
    if isinstance(event, RunEnded):
        return [NewRunEvent(type=EventType.RUN_FINISHED, at=at, data={"run": run_json(event.run)})]
    if isinstance(event, MessageSaved):
        return _message_events(event, at)
    if isinstance(event, CompactionEvent):
        return [NewRunEvent(type=EventType.COMPACTION, at=at, data=compaction_event_json(event))]
    return []  # pragma: no cover - a new event kind is simply not streamed yet


def _message_events(event: MessageSaved, at: float) -> list[NewRunEvent]:
    stored = event.stored
    message = stored.message
    out = [NewRunEvent(type=EventType.MESSAGE, at=at, data={"message": message_json(stored)})]
    if isinstance(message, AssistantMessage):
        for call in message.tool_calls:
            data = {
                "call_id": call.id,
                "name": call.name,
                "arguments": call.arguments(),
                "seq": stored.seq,
            }
            out.append(NewRunEvent(type=EventType.TOOL_CALL_REQUESTED, at=at, data=data))
    elif isinstance(message, ToolResultMessage):
        tool_result = message.result
        result = {
            "call_id": tool_result.call_id,
            "tool_name": message.tool_name,
            "status": tool_result.status.value,
            "seq": stored.seq,
        }
        out.append(NewRunEvent(type=EventType.TOOL_RESULT, at=at, data=result))
    return out


def sse_payload(event: RunEventRecord) -> str:
    return json.dumps(
        {
            "run_id": event.run_id,
            "seq": event.seq,
            "type": event.type.value,
            "at": iso(event.at),
            **event.data,
        },
        ensure_ascii=False,
        separators=(",", ":"),
    )


def sse_frame(event: RunEventRecord) -> str:
    return f"id: {event.seq}\nevent: {event.type.value}\ndata: {sse_payload(event)}\n\n"
