"""A deterministic token meter for tests: about four characters per token."""

from __future__ import annotations

import json
import math

from plait.domain.messages import AssistantMessage, Message, ToolResultMessage
from plait.domain.tools import ToolSpec

__all__ = ["CharMeter"]


class CharMeter:
    """``ceil(characters / chars_per_token)`` plus ``per_message`` tokens of framing per
    message. Not a real tokenizer: use it where a test needs predictable counts."""

    def __init__(self, *, chars_per_token: int = 4, per_message: int = 4, name: str = "") -> None:
        self._cpt = chars_per_token
        self._per_message = per_message
        self._name = name or f"chars/{chars_per_token}"
        self.counted = 0
        """How many messages were measured (to check that counts are cached)."""

    @property
    def name(self) -> str:
        return self._name

    @property
    def fingerprint(self) -> str:
        """What stored counts are kept under (everything that decides a count)."""
        return f"chars/{self._cpt}/{self._per_message}"

    @property
    def exact(self) -> bool:
        return False

    def count_text(self, text: str) -> int:
        return math.ceil(len(text) / self._cpt)

    def count_message(self, message: Message) -> int:
        self.counted += 1
        if isinstance(message, AssistantMessage):
            chars = len(message.text) + sum(
                len(c.name) + len(c.arguments_json) for c in message.tool_calls
            )
        elif isinstance(message, ToolResultMessage):
            result = message.result
            chars = len(message.tool_name) + len(result.content) + len(result.reason or "")
        else:
            chars = len(message.text)
        return math.ceil(chars / self._cpt) + self._per_message

    def count_tools(self, tools: tuple[ToolSpec, ...]) -> int:
        shape = [
            {"name": t.name, "description": t.description, "parameters": dict(t.parameters)}
            for t in tools
        ]
        return math.ceil(len(json.dumps(shape, default=str)) / self._cpt)
