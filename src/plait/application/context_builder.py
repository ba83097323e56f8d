"""ContextBuilder: the model-visible Context for a role (DESIGN §1, §8).

Today the assistant sees the instructions, every tool spec and the whole history (a
:class:`~plait.domain.context.Prefix` view, O(1) to build). Token counts come from a
:class:`~plait.application.ports.TokenMeter` and are cached per message id, so a long
session is not re-counted at each step; compaction uses :meth:`ContextBuilder.count`
to measure pressure and will fill in summaries, constraints and evidence here.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

from plait.application.ports import ModelRole, TokenMeter
from plait.domain.context import Context, Correction, Prefix
from plait.domain.messages import AssistantMessage, Message
from plait.domain.tools import ToolSpec

__all__ = ["ApproxMeter", "ContextBuilder"]


class ApproxMeter:
    """A conservative estimate: one token per 3 characters of content, plus a small
    per-message overhead. Used until a model-specific meter is configured."""

    name = "approx-chars/3"
    exact = False

    def count_text(self, text: str) -> int:
        return (len(text) + 2) // 3

    def count_message(self, message: Message) -> int:
        if message.kind == "assistant":
            calls = sum(
                self.count_text(c.name) + self.count_text(c.arguments_json)
                for c in message.tool_calls
            )
            return 4 + self.count_text(message.text) + calls
        if message.kind == "tool_result":
            r = message.result
            return 4 + self.count_text(message.tool_name) + self.count_text(r.content)
        return 4 + self.count_text(message.text)

    def count_tools(self, tools: tuple[ToolSpec, ...]) -> int:
        return sum(
            self.count_text(t.name) + self.count_text(t.description) + len(str(t.parameters)) // 3
            for t in tools
        )


class ContextBuilder:
    """Builds the Context of one model call. ``cache_size`` bounds the per-message count
    cache (least recently used counts are dropped first)."""

    def __init__(
        self,
        *,
        instructions: str,
        tools: tuple[ToolSpec, ...],
        meter: TokenMeter | None = None,
        cache_size: int = 200_000,
    ) -> None:
        self.instructions = instructions
        self.tools = tools
        self.meter: TokenMeter = meter or ApproxMeter()
        self._cache: OrderedDict[str, int] = OrderedDict()
        self._cache_size = cache_size
        self._tools_tokens: int | None = None

    def assistant(
        self, history: list[Message], corrections: Sequence[Correction] = ()
    ) -> Context[AssistantMessage]:
        """The assistant's context: instructions, tools, the whole history, and the
        corrections asked for in this step."""
        return Context(
            instructions=self.instructions,
            tools=self.tools,
            items=Prefix(history),
            output_type=AssistantMessage,
            corrections=tuple(corrections),
        )

    def for_role(
        self,
        role: ModelRole,
        *,
        instructions: str,
        items: Sequence[Message],
        output_type: type[Any],
    ) -> Context[Any]:
        """A context for another role (reviewer, summarizer): its own instructions, no
        tools, the given items."""
        del role  # the same shape for every non-assistant role, for now
        return Context(instructions=instructions, tools=(), items=items, output_type=output_type)

    def count(self, context: Context[Any]) -> int:
        """Tokens of a whole context by this builder's meter; per-message counts cached."""
        total = self.meter.count_text(context.instructions)
        if context.tools:
            if context.tools is self.tools:
                if self._tools_tokens is None:
                    self._tools_tokens = self.meter.count_tools(self.tools)
                total += self._tools_tokens
            else:
                total += self.meter.count_tools(context.tools)
        for message in context.items:
            total += self.count_message(message)
        for c in context.corrections:
            total += self.meter.count_text(c.rejected_text)
            total += sum(self.meter.count_text(p) for p in c.problems)
        return total

    def count_message(self, message: Message) -> int:
        cached = self._cache.get(message.id)
        if cached is not None:
            self._cache.move_to_end(message.id)
            return cached
        n = self.meter.count_message(message)
        self._cache[message.id] = n
        if len(self._cache) > self._cache_size:
            self._cache.popitem(last=False)
        return n
