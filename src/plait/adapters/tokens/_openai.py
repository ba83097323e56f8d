"""Exact offline token counts for OpenAI's encodings (``o200k_base``, ``cl100k_base``),
with the files shipped in the ``quicktok-v1`` wheel (byte-identical to tiktoken, which
would download them at first use). The encoding loads at the first count."""

from __future__ import annotations

import json
from typing import Any

from plait.domain.messages import AssistantMessage, Message, ToolResultMessage
from plait.domain.tools import ToolSpec

__all__ = ["OpenAIMeter", "encoding_for"]

# OpenAI's chat framing (their cookbook's rule): 3 tokens per message, plus the reply primer
_PER_MESSAGE = 3
_PER_CALL = 3
_PER_TOOL = 8

_CL100K_PREFIXES = ("gpt-4-", "gpt-3.5")


def encoding_for(model: str) -> str:
    """``cl100k_base`` for the GPT-4 and GPT-3.5 generation, ``o200k_base`` for every
    later model (GPT-4o, 4.1, 5, the o-series)."""
    name = model.lower()
    if name == "gpt-4" or name.startswith(_CL100K_PREFIXES):
        return "cl100k_base"
    return "o200k_base"


class OpenAIMeter:
    """A :class:`~plait.application.ports.TokenMeter` counting with the model's encoding."""

    def __init__(self, encoding: str = "o200k_base") -> None:
        self._encoding_name = encoding
        self._encoding: Any = None

    @property
    def name(self) -> str:
        return f"openai/{self._encoding_name}"

    @property
    def exact(self) -> bool:
        return True

    def _enc(self) -> Any:
        if self._encoding is None:
            import quicktok  # type: ignore[import-untyped]

            self._encoding = quicktok.get_encoding(self._encoding_name)
        return self._encoding

    def count_text(self, text: str) -> int:
        if not text:
            return 0
        return len(self._enc().encode(text, disallowed_special=()))

    def count_message(self, message: Message) -> int:
        if isinstance(message, AssistantMessage):
            n = self.count_text(message.text) + self.count_text("assistant")
            for c in message.tool_calls:
                n += _PER_CALL + self.count_text(c.name) + self.count_text(c.arguments_json)
        elif isinstance(message, ToolResultMessage):
            r = message.result
            n = self.count_text(r.content) + self.count_text(r.reason or "") + 2
        else:
            n = self.count_text(message.text) + 1
        return n + _PER_MESSAGE

    def count_tools(self, tools: tuple[ToolSpec, ...]) -> int:
        return sum(
            _PER_TOOL
            + self.count_text(t.name)
            + self.count_text(t.description)
            + self.count_text(json.dumps(dict(t.parameters), ensure_ascii=False, default=list))
            for t in tools
        )
