"""Ports of the tools: a tool and its executor (what a runtime builds when it opens; one
call of a tool is in :mod:`.calls`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from plait.application.arguments import check_at_registration
from plait.domain.record import record

if TYPE_CHECKING:
    from plait.application.ports.calls import ToolInvocation, ToolOutput
    from plait.domain.tools import EffectClass, ToolSpec

__all__ = [
    "Tool",
    "ToolExecutor",
]


class ToolExecutor(Protocol):
    """Runs a call. Raise :class:`~plait.domain.errors.ToolError` for failures the model
    should read; any other exception is reported as an internal tool failure."""

    async def __call__(self, invocation: ToolInvocation) -> ToolOutput: ...


@record(kw_only=True)
class Tool:
    spec: ToolSpec
    execute: ToolExecutor
    stoppable: bool = True
    """Cancelling the executor's task really stops it. When False, a cancelled run waits
    for the call to finish (within its timeout) and records what really happened."""
    effect_of: Callable[[dict[str, Any]], EffectClass] | None = None
    """The effect class of one call, from its arguments, where the tool can prove more
    than ``spec.effect`` says: e.g. a compare-and-write with a content hash is
    idempotent. Recorded with the call when it is requested, so recovery uses it."""
    own_deadline: bool = False
    """The call keeps to a deadline of its own (a sub-agent's child run, whose budget is
    within the run's): the run's ``tool_timeout_seconds`` does not apply to it, only the
    run's deadline."""

    def __post_init__(self) -> None:
        check_at_registration(self.spec)  # a bad schema is refused here, naming the tool
