"""Complete units and cut points (docs/design.md#forks): where a history may be cut.

A history is a sequence of *units*, each contiguous:

- a user message, or an assistant message without tool calls (one message each);
- an assistant message with tool calls together with the results of those calls, which
  follow it directly (any order among themselves).

Every user or assistant message begins a unit; a tool result only ever continues one. A
unit is *complete* when each of its calls has a result. A *cut point* is the last message
of a complete unit: a fork may copy the history through it, and a compaction boundary may
fall after it, without leaving a call unpaired or a result orphaned.

A tool result that does not answer a pending call of the unit it follows (malformed
history) forms a unit of its own that is never complete, so no cut lands next to it
silently.

The functions take any sequence of messages and indices into it. ``locate_cut`` also works
on a *window* of a longer history (say, the messages around a requested fork point), and
answers ``None`` when the window is too narrow to decide; widen it and ask again.
"""

from __future__ import annotations

from collections.abc import Sequence

from plait.domain.messages import AssistantMessage, Message, ToolResultMessage
from plait.domain.record import record

__all__ = [
    "CutPoints",
    "Unit",
    "cut_points",
    "is_cut_point",
    "locate_cut",
    "unit_start",
    "units",
]


@record
class Unit:
    """Messages ``start..end`` (inclusive indices) form one unit."""

    start: int
    end: int
    complete: bool


@record
class CutPoints:
    """The answer about one requested cut: is it valid, and if not, the nearest valid
    cut points before and after it (indices; ``None`` where there is none)."""

    valid: bool
    before: int | None = None
    after: int | None = None


def units(messages: Sequence[Message], start: int = 0) -> list[Unit]:
    """Partition ``messages[start:]`` (``start`` must begin a unit) into units."""
    out: list[Unit] = []
    count = len(messages)
    index = start
    while index < count:
        message = messages[index]
        if isinstance(message, AssistantMessage) and message.tool_calls:
            pending = {c.id for c in message.tool_calls}
            after = index + 1
            while after < count and pending:
                reply = messages[after]
                if not isinstance(reply, ToolResultMessage) or reply.call_id not in pending:
                    break
                pending.discard(reply.call_id)
                after += 1
            out.append(Unit(index, after - 1, not pending))
            index = after
        else:
            # A user message, a plain assistant message, or an orphaned tool result.
            out.append(Unit(index, index, not isinstance(message, ToolResultMessage)))
            index += 1
    return out


def cut_points(messages: Sequence[Message]) -> list[int]:
    """Every valid cut point of a whole history, in order."""
    return [u.end for u in units(messages) if u.complete]


def is_cut_point(messages: Sequence[Message], index: int) -> bool:
    """Whether the whole history ``messages`` may be cut after ``messages[index]``."""
    found = locate_cut(messages, index)
    assert found is not None  # a whole history always decides
    return found.valid


def unit_start(messages: Sequence[Message], index: int) -> int | None:
    """The nearest index at or before ``index`` that begins a unit (a user or assistant
    message), or ``None`` if only tool results precede it in ``messages``."""
    for start in range(index, -1, -1):
        if not isinstance(messages[start], ToolResultMessage):
            return start
    return None


def locate_cut(
    messages: Sequence[Message],
    index: int,
    *,
    from_start: bool = True,
    to_end: bool = True,
) -> CutPoints | None:
    """Is cutting after ``messages[index]`` valid, and if not, where are the nearest valid
    cuts before and after it?

    ``messages`` may be a window of a longer history: ``from_start`` says it begins at the
    history's first message, ``to_end`` that it runs to the last. When the window cannot
    decide (no unit begins at or before ``index`` inside it, or a needed neighbour lies
    outside it) the answer is ``None``.
    """
    if not 0 <= index < len(messages):
        raise IndexError(f"cut index {index} is outside the {len(messages)} messages given")
    first = 0 if from_start else _first_start(messages, index)
    if first is None:
        return None
    parts = units(messages, first)
    here = next(u for u in parts if u.start <= index <= u.end)
    if here.complete and here.end == index:
        return CutPoints(valid=True)
    befores = [u.end for u in parts if u.complete and u.end < index]
    afters = [u.end for u in parts if u.complete and u.end > index]
    if not befores and not from_start:
        return None
    if not afters and not to_end:
        return None
    return CutPoints(
        valid=False,
        before=befores[-1] if befores else None,
        after=afters[0] if afters else None,
    )


def _first_start(messages: Sequence[Message], index: int) -> int | None:
    for start in range(index + 1):
        if not isinstance(messages[start], ToolResultMessage):
            return start
    return None
