"""A conservative token estimate for models without an offline tokenizer.

It over-counts rather than under-counts: ASCII text at three characters per token
(tokenizers average about four), every other character as one token more, and a few
tokens of framing per message. Compaction then triggers a little early instead of
sending a request that overflows.
"""

from __future__ import annotations

import json
import math

from plait.domain.messages import AssistantMessage, Message, ToolResultMessage
from plait.domain.tools import ToolSpec

__all__ = ["EstimateMeter"]

_FRAME = 4


class EstimateMeter:
    def __init__(self, name: str = "estimate") -> None:
        self._name = name

    @property
    def name(self) -> str:
        return self._name

    @property
    def exact(self) -> bool:
        return False

    def count_text(self, text: str) -> int:
        if text.isascii():
            return math.ceil(len(text) / 3)
        wide = sum(1 for ch in text if ord(ch) > 127)
        return math.ceil(len(text) / 3) + wide

    def count_message(self, message: Message) -> int:
        # The count of the parts' concatenation, without building it (the hot path of a
        # long session's first context build).
        if isinstance(message, ToolResultMessage):
            result = message.result
            parts: tuple[str, ...] = (message.tool_name, result.content, result.reason or "")
        elif isinstance(message, AssistantMessage):
            parts = (message.text,)
            for call in message.tool_calls:
                parts += (call.name, call.arguments_json)
        else:
            parts = (message.text,)
        length = wide = 0
        for part in parts:
            length += len(part)
            if not part.isascii():
                wide += sum(1 for ch in part if ord(ch) > 127)
        return math.ceil(length / 3) + wide + _FRAME

    def count_tools(self, tools: tuple[ToolSpec, ...]) -> int:
        shape = [
            {"name": t.name, "description": t.description, "parameters": t.parameters}
            for t in tools
        ]
        return self.count_text(json.dumps(shape, default=_plain, ensure_ascii=False))


def _plain(value: object) -> object:
    if isinstance(value, tuple | frozenset):
        return list(value)
    try:
        return dict(value)  # type: ignore[call-overload]
    except (TypeError, ValueError):
        return repr(value)
