"""The tool call ids a resumed run starts with (every call of the stored history)."""

from __future__ import annotations

from collections.abc import Iterator

from plait.application._run_state import UsedCallIds, call_ids
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


class _Counted(list[Message]):
    """A history that counts how often it is walked."""

    walks = 0

    def __iter__(self) -> Iterator[Message]:
        self.walks += 1
        return super().__iter__()


def test_used_call_ids_walks_the_history_once_and_only_when_asked() -> None:
    history = _Counted(
        [
            UserMessage(id="m1", text="c9", created_at=0.0),
            AssistantMessage(id="m2", text="", created_at=0.0, tool_calls=(_call("c1"),)),
        ]
    )
    used = UsedCallIds(history)
    used.update(["c2"])
    assert history.walks == 0  # adding the run's own calls needs no walk
    assert "c2" in used
    assert history.walks == 0  # found among the added ones
    assert "c1" in used and "c9" not in used and "m2" not in used
    assert "c3" not in used
    assert history.walks == 1
    used.update(["c3"])
    assert "c3" in used and "c1" in used
    assert history.walks == 1


def test_used_call_ids_sees_what_the_run_appended_before_the_first_check() -> None:
    history: list[Message] = [UserMessage(id="m1", text="go", created_at=0.0)]
    used = UsedCallIds(history)
    history.append(AssistantMessage(id="m2", text="", created_at=0.0, tool_calls=(_call("c1"),)))
    assert "c1" in used
