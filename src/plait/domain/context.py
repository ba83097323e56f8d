"""Context[T]: what one model call sees, and what it must return."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from itertools import islice
from typing import Generic, TypeVar, overload

from plait.domain.answers import OutputSchema
from plait.domain.messages import Message
from plait.domain.record import record
from plait.domain.tools import ToolSpec

__all__ = ["CompactedRange", "Context", "Correction", "Prefix"]

T = TypeVar("T")
M = TypeVar("M")


class Prefix(Sequence[M]):
    """A read-only view of the first ``length`` items of an append-only list.

    Building one costs O(1) whatever the history's length, and later appends to the list
    do not show through, so a model client may keep the context it was given.
    """

    __slots__ = ("_items", "_length")

    def __init__(self, items: list[M], length: int | None = None) -> None:
        self._items = items
        self._length = len(items) if length is None else length

    def __len__(self) -> int:
        return self._length

    @overload
    def __getitem__(self, index: int) -> M: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[M]: ...
    def __getitem__(self, index: int | slice) -> M | Sequence[M]:
        if isinstance(index, slice):
            return self._items[: self._length][index]
        if index < 0:
            index += self._length
        if not 0 <= index < self._length:
            raise IndexError("history index out of range")
        return self._items[index]

    def __iter__(self) -> Iterator[M]:
        return islice(self._items, self._length)

    def __reversed__(self) -> Iterator[M]:
        return (self._items[i] for i in range(self._length - 1, -1, -1))

    def __repr__(self) -> str:
        return f"Prefix(<{self._length} items>)"


@record(kw_only=True)
class Correction:
    """A rejected model output and why it was rejected. Shown to the model on the next
    attempt; never stored as history."""

    rejected_text: str
    problems: tuple[str, ...]


@record(kw_only=True)
class CompactedRange:
    """Set on a context whose first history messages are replaced by a summary: the
    summary stands in for messages ``1..covered_through_seq`` (``omitted_messages`` of
    them, ``omitted_assistant_messages`` of those assistant turns)."""

    summary_id: str
    generation: int
    covered_through_seq: int
    omitted_messages: int
    omitted_assistant_messages: int


@record(kw_only=True)
class Context(Generic[T]):
    """Built fresh for every model call.

    ``items`` is the selected history, in order (often a :class:`Prefix` view).
    ``output_type`` is the type the caller will validate the answer into.
    """

    instructions: str
    tools: tuple[ToolSpec, ...]
    items: Sequence[Message]
    output_type: type[T]
    corrections: tuple[Correction, ...] = ()
    compacted: CompactedRange | None = None
    """Which history range a summary replaces in ``items`` (compaction), if any."""
    output_schema: OutputSchema | None = None
    """The schema the final answer must match: adapters with a native structured-output
    mode send it (OpenAI ``response_format``/``text.format``, Gemini
    ``responseJsonSchema``, Anthropic a forced ``final_answer`` tool)."""
