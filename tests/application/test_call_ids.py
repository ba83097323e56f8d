"""The tool call ids a resumed run starts with (every call of the stored history)."""

from __future__ import annotations

from plait.application._run_state import call_ids
from plait.domain.messages import (
    AssistantMessage,
    Message,
    ToolCall,
    ToolResult,
    ToolResultMessage,
    ToolStatus,
    UserMessage,
)


def _call(call_id: str) -> ToolCall:
    return ToolCall.create(id=call_id, name="echo", arguments={"text": call_id})


def test_every_call_of_every_assistant_message_and_nothing_else() -> None:
    history: list[Message] = [
        UserMessage(id="m1", text="c0", created_at=0.0),
        AssistantMessage(id="m2", text="", created_at=0.0, tool_calls=(_call("c1"), _call("c2"))),
        ToolResultMessage(
            id="m3",
            tool_name="echo",
            result=ToolResult(call_id="c1", status=ToolStatus.SUCCEEDED),
            created_at=0.0,
        ),
        AssistantMessage(id="m4", text="no calls", created_at=0.0),
        AssistantMessage(id="m5", text="", created_at=0.0, tool_calls=(_call("c3"),)),
    ]
    assert call_ids(history) == {"c1", "c2", "c3"}
    assert call_ids([]) == set()
