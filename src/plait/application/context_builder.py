"""ContextBuilder: the model-visible Context for a role (docs/architecture.md,
docs/design.md#compaction).

Today the assistant sees the instructions, every tool spec and the whole history (a
:class:`~plait.domain.context.Prefix` view, O(1) to build). :meth:`ContextBuilder.count`
measures a context with a :class:`~plait.application.ports.TokenMeter`: each message is
counted once per meter (counts are cached by meter and message id; messages are
immutable), and a history that grew since it was last counted costs only its new
messages (a running sum per history), so a long session is neither re-metered nor
re-summed at each step. (With compaction on, its stage builds the context and keeps the
same kind of ledger; see :mod:`plait.application.compaction`.)
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

from plait.application.ports import TokenMeter
from plait.domain.context import Context, Correction, Prefix
from plait.domain.messages import AssistantMessage, Message
from plait.domain.record import record
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
            result = message.result
            return 4 + self.count_text(message.tool_name) + self.count_text(result.content)
        return 4 + self.count_text(message.text)

    def count_tools(self, tools: tuple[ToolSpec, ...]) -> int:
        return sum(
            self.count_text(t.name) + self.count_text(t.description) + len(str(t.parameters)) // 3
            for t in tools
        )


@record
class _Sum:
    """The tokens of a history's first ``length`` messages, ending with ``last_id``."""

    meter: str
    length: int
    last_id: str
    tokens: int


class ContextBuilder:
    """Builds the Context of one model call. ``cache_size`` bounds the per-message count
    cache (least recently used counts are dropped first); ``histories`` bounds the
    running sums kept (one per history, keyed by its first message)."""

    def __init__(
        self,
        *,
        instructions: str,
        tools: tuple[ToolSpec, ...],
        meter: TokenMeter | None = None,
        cache_size: int = 200_000,
        histories: int = 1_024,
    ) -> None:
        self.instructions = instructions
        self.tools = tools
        self.meter: TokenMeter = meter or ApproxMeter()
        self._cache: OrderedDict[tuple[str, str], int] = OrderedDict()
        self._cache_size = cache_size
        self._sums: OrderedDict[str, _Sum] = OrderedDict()
        self._histories = histories
        self._tools_tokens: int | None = None

    def use_tools(self, tools: tuple[ToolSpec, ...]) -> None:
        """Offer ``tools`` from the next context on (the tool set changed)."""
        self.tools = tools
        self._tools_tokens = None

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
        total += self.count_items(context.items)
        for correction in context.corrections:
            total += self.meter.count_text(correction.rejected_text)
            total += sum(self.meter.count_text(p) for p in correction.problems)
        return total

    def count_items(self, items: Sequence[Message]) -> int:
        """Tokens of a history (or a prefix of one): what was summed for it before is
        reused when ``items`` extends it, so only the new messages are looked at."""
        count = len(items)
        if count == 0:
            return 0
        key, meter = items[0].id, self.meter.name
        known = self._sums.get(key)
        start, total = 0, 0
        if (
            known is not None
            and known.meter == meter
            and known.length <= count
            and items[known.length - 1].id == known.last_id
        ):
            start, total = known.length, known.tokens
        last = items[count - 1] if start == count else None
        for index in range(start, count):
            last = items[index]
            total += self.count_message(last)
        assert last is not None
        self._sums[key] = _Sum(meter, count, last.id, total)
        self._sums.move_to_end(key)
        if len(self._sums) > self._histories:
            self._sums.popitem(last=False)
        return total

    def count_message(self, message: Message) -> int:
        key = (self.meter.name, message.id)
        cached = self._cache.get(key)
        if cached is not None:
            self._cache.move_to_end(key)
            return cached
        tokens = self.meter.count_message(message)
        self._cache[key] = tokens
        if len(self._cache) > self._cache_size:
            self._cache.popitem(last=False)
        return tokens
