"""A conservative token estimate for models whose tokenizer is not available offline: it
may over-count, never knowingly under-count. Compaction corrects its totals upwards by the
usage providers report (:mod:`plait.application.compaction._calibration`), so cached
per-message counts stay valid."""

from __future__ import annotations

import json
import math

from plait.domain.messages import AssistantMessage, Message, ToolResultMessage
from plait.domain.tools import ToolSpec

__all__ = ["DEFAULT_SAFETY", "EstimatingMeter"]

DEFAULT_SAFETY = 1.2
"""Head room over the raw estimate."""
_CHARS_PER_TOKEN = 4.0
_FRAME = 4


class EstimatingMeter:
    """Characters / 4 (ASCII; any other character counts as a token of its own), times
    ``safety``."""

    def __init__(self, name: str, *, safety: float = DEFAULT_SAFETY) -> None:
        self._name = name
        self._safety = safety

    @property
    def name(self) -> str:
        return f"estimate/{self._name}"

    @property
    def exact(self) -> bool:
        return False

    @property
    def factor(self) -> float:
        return self._safety

    def raw_count(self, text: str) -> int:
        if text.isascii():
            return math.ceil(len(text) / _CHARS_PER_TOKEN)
        wide = sum(1 for ch in text if ord(ch) > 127)
        return math.ceil((len(text) - wide) / _CHARS_PER_TOKEN) + wide

    def count_text(self, text: str) -> int:
        return math.ceil(self.raw_count(text) * self.factor) if text else 0

    def count_message(self, message: Message) -> int:
        if isinstance(message, AssistantMessage):
            text = message.text + "".join(c.name + c.arguments_json for c in message.tool_calls)
        elif isinstance(message, ToolResultMessage):
            result = message.result
            text = message.tool_name + result.content + (result.reason or "")
        else:
            text = message.text
        return self.count_text(text) + _FRAME

    def count_tools(self, tools: tuple[ToolSpec, ...]) -> int:
        shape = [
            {"name": t.name, "description": t.description, "parameters": dict(t.parameters)}
            for t in tools
        ]
        return self.count_text(json.dumps(shape, ensure_ascii=False, default=list))
