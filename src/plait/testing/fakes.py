"""Deterministic stand-ins for the clock, id generator and tools."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable
from typing import Any

from plait.application.ports import Tool, ToolInvocation, ToolOutput
from plait.domain.messages import ToolCall
from plait.domain.tools import EffectClass, ToolSpec

__all__ = ["FixedClock", "RecordingTool", "SequentialIds", "ToolFunction", "echo_tool"]


class FixedClock:
    """A :class:`~plait.application.ports.Clock` that only moves when told to.

    ``monotonic()`` starts at a different value from ``now()`` so code that mixes the two
    clocks (a deadline compared with a timestamp) fails visibly in tests.
    """

    def __init__(self, start: float = 1_700_000_000.0, *, monotonic_start: float = 1_000.0) -> None:
        self._now = float(start)
        self._monotonic = float(monotonic_start)

    def now(self) -> float:
        return self._now

    def monotonic(self) -> float:
        return self._monotonic

    def advance(self, seconds: float) -> None:
        """Move both clocks forward. Time never goes back."""
        if seconds < 0:
            raise ValueError(f"a clock cannot go back ({seconds} seconds)")
        self._now += seconds
        self._monotonic += seconds


class SequentialIds:
    """An :class:`~plait.application.ports.IdGenerator` producing ``msg_000001``,
    ``msg_000002``, ``run_000001``, ... (one counter per prefix, from ``start``).

    Ids restart with every instance: when several instances (processes) share one store,
    give each its own ``prefix_tag`` (``SequentialIds(prefix_tag="b")`` makes
    ``msg_b000001``) or ``start``.
    """

    def __init__(self, *, start: int = 1, prefix_tag: str = "") -> None:
        self._start = start
        self._tag = prefix_tag
        self._next: dict[str, int] = {}

    def new(self, prefix: str) -> str:
        number = self._next.get(prefix, self._start)
        self._next[prefix] = number + 1
        return f"{prefix}_{self._tag}{number:06d}"


ToolFunction = Callable[[ToolInvocation], "ToolOutput | str | Awaitable[ToolOutput | str]"]
"""What a :class:`RecordingTool` may call: returns the output (or its text), plain or async."""


class RecordingTool:
    """A tool for tests: records each invocation and behaves as configured.

    On each call, in order: record the invocation in :attr:`invocations`; sleep ``delay``
    seconds (``asyncio.sleep``, so cancellation and timeouts work); raise ``raises`` if
    set; return ``fn(invocation)`` if set, else ``output``. Invocations that ran to the end
    (returned or raised) are also in :attr:`finished`; a cancelled one is not.

    Use :attr:`tool` where a :class:`~plait.application.ports.Tool` is expected.
    """

    def __init__(
        self,
        spec: ToolSpec,
        *,
        output: ToolOutput | str = "ok",
        raises: BaseException | type[BaseException] | None = None,
        delay: float = 0.0,
        fn: ToolFunction | None = None,
        stoppable: bool = True,
    ) -> None:
        self.spec = spec
        self.output = output if isinstance(output, ToolOutput) else ToolOutput(content=output)
        self.raises = raises
        self.delay = delay
        self.fn = fn
        self.invocations: list[ToolInvocation] = []
        self.finished: list[ToolInvocation] = []
        self.tool = Tool(spec=spec, execute=self, stoppable=stoppable)

    @property
    def calls(self) -> list[ToolCall]:
        """The tool calls of every invocation, in order."""
        return [invocation.call for invocation in self.invocations]

    async def __call__(self, invocation: ToolInvocation) -> ToolOutput:
        self.invocations.append(invocation)
        if self.delay:
            await asyncio.sleep(self.delay)
        try:
            output = await self._run(invocation)
        except asyncio.CancelledError:
            raise
        except BaseException:
            self.finished.append(invocation)
            raise
        self.finished.append(invocation)
        return output

    async def _run(self, invocation: ToolInvocation) -> ToolOutput:
        if self.raises is not None:
            raise self.raises
        if self.fn is None:
            return self.output
        result: Any = self.fn(invocation)
        if inspect.isawaitable(result):
            result = await result
        return result if isinstance(result, ToolOutput) else ToolOutput(content=str(result))


def echo_tool(name: str = "echo") -> RecordingTool:
    """A read-only tool ``echo(text)`` that returns ``text``."""
    spec = ToolSpec(
        name=name,
        description="Return the given text unchanged.",
        parameters={
            "type": "object",
            "properties": {"text": {"type": "string"}},
            "required": ["text"],
            "additionalProperties": False,
        },
        effect=EffectClass.READ_ONLY,
    )

    def echo(invocation: ToolInvocation) -> str:
        return str(invocation.call.arguments()["text"])

    return RecordingTool(spec, fn=echo)
