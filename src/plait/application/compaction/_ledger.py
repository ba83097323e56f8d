"""Token accounting over an append-only history, incremental.

Counting is the expensive part of building a context for a long session. A
:class:`CountCache` remembers each message's count per meter (messages are immutable and
keyed by id), and a :class:`Ledger` keeps running sums and the complete-unit cut points of
one history, extended by the messages appended since it last looked. Building the next
context then costs O(new messages), not O(history). A ledger without a meter counts
nothing (every count is 0): it still finds the cut points, the latest user request and
the assistant turns, for a model without a window whose context is never measured.
The counts a ledger made itself (not found in the cache) are listed in ``fresh`` until
taken, so that they can be stored with the history (see
:class:`~plait.application.ports.TokenCountStore`).
"""

from __future__ import annotations

from collections.abc import Sequence

from plait.application.ports import TokenMeter
from plait.domain.messages import AssistantMessage, Message, ToolResultMessage
from plait.domain.tools import ToolSpec

__all__ = ["CountCache", "Ledger"]


class CountCache:
    """Per (meter, message id) token counts, and per (meter, tool tuple) counts."""

    def __init__(self) -> None:
        self._messages: dict[str, dict[str, int]] = {}
        """Per meter name: message id -> count."""
        self._tools: dict[tuple[str, int], tuple[tuple[ToolSpec, ...], int]] = {}
        self._texts: dict[tuple[str, str], int] = {}

    def message(self, meter: TokenMeter, message: Message) -> int:
        counts = self.of(meter)
        tokens = counts.get(message.id)
        if tokens is None:
            tokens = counts[message.id] = meter.count_message(message)
        return tokens

    def of(self, meter: TokenMeter) -> dict[str, int]:
        """The meter's counts by message id (a loop over many messages looks them up
        here directly)."""
        counts = self._messages.get(meter.name)
        if counts is None:
            counts = self._messages[meter.name] = {}
        return counts

    def tools(self, meter: TokenMeter, tools: tuple[ToolSpec, ...]) -> int:
        key = (meter.name, id(tools))
        hit = self._tools.get(key)
        if hit is None or hit[0] is not tools:  # keeps the tuple alive: ids are not reused
            hit = self._tools[key] = (tools, meter.count_tools(tools))
        return hit[1]

    def text(self, meter: TokenMeter, text: str) -> int:
        if len(text) > 4096:  # long texts (instructions, summaries) are few: remember them
            key = (meter.name, text)
            tokens = self._texts.get(key)
            if tokens is None:
                tokens = self._texts[key] = meter.count_text(text)
            return tokens
        return meter.count_text(text)


class Ledger:
    """Running token sums and cut points of one history for one meter.

    ``prefix[k]`` is the token count of ``history[:k]``; ``cuts`` are the ``k`` where
    ``history[:k]`` ends a complete unit (see :func:`plait.domain.compaction.cut_points`).
    """

    __slots__ = (
        "_cache",
        "_last_id",
        "_open",
        "assistants",
        "cuts",
        "fresh",
        "last_user",
        "meter",
        "prefix",
    )

    def __init__(self, meter: TokenMeter | None, cache: CountCache) -> None:
        self.meter = meter
        self._cache = cache
        self.prefix: list[int] = [0]
        self.assistants: list[int] = [0]
        """``assistants[k]``: assistant messages among ``history[:k]``."""
        self.cuts: list[int] = []
        self.last_user = -1
        """Index of the latest user message (-1: none)."""
        self._open: set[str] = set()
        self._last_id: str | None = None
        self.fresh: dict[str, int] = {}
        """Counts this ledger measured itself (message id -> tokens), until taken."""

    def sync(self, history: Sequence[Message]) -> None:
        """Take in the messages appended since the last call (rebuilds if ``history`` is
        not an extension of what was seen)."""
        known = len(self.prefix) - 1
        if len(history) < known or (known and history[known - 1].id != self._last_id):
            self.prefix, self.assistants, self.cuts, self._open = [0], [0], [], set()
            self.last_user = -1
            known = 0
        if len(history) == known:
            return
        meter, fresh = self.meter, self.fresh
        counts: dict[str, int] = {} if meter is None else self._cache.of(meter)
        prefix, cuts, open_calls = self.prefix, self.cuts, self._open
        total, turns, assistants = prefix[-1], self.assistants[-1], self.assistants
        for index in range(known, len(history)):
            message = history[index]
            if meter is not None:
                tokens = counts.get(message.id)
                if tokens is None:
                    tokens = counts[message.id] = fresh[message.id] = meter.count_message(message)
                total += tokens
            prefix.append(total)
            if isinstance(message, ToolResultMessage):
                assistants.append(turns)
                if message.call_id not in open_calls:
                    continue  # an orphaned result never ends a complete unit
                open_calls.discard(message.call_id)
            else:
                if isinstance(message, AssistantMessage):
                    turns += 1
                    if open_calls:  # a unit broken off before all its results: incomplete
                        open_calls.clear()
                    if message.tool_calls:
                        open_calls.update(call.id for call in message.tool_calls)
                else:
                    if message.kind == "user":
                        self.last_user = index
                    open_calls.clear()
                assistants.append(turns)
            if not open_calls:
                cuts.append(index + 1)
        self._last_id = history[-1].id

    def tokens(self, start: int, end: int | None = None) -> int:
        """Tokens of ``history[start:end]``."""
        stop = len(self.prefix) - 1 if end is None else end
        return self.prefix[stop] - self.prefix[start]
