"""Ports of the tools: a tool, its executor, one invocation and its output."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from plait.application.arguments import check_at_registration

if TYPE_CHECKING:
    from plait.domain.messages import ToolCall
    from plait.domain.tools import EffectClass, ToolSpec

__all__ = [
    "Tool",
    "ToolExecutor",
    "ToolInvocation",
    "ToolOutput",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolInvocation:
    """One execution of a validated, recorded call."""

    call: ToolCall
    session_id: str
    run_id: str
    workspace: str | None
    idempotency_key: str
    """Stable across re-executions of the same call: pass it on to deduplicate."""
    output_cap_bytes: int = 32_000
    """How much output the model will see; a tool producing more should spool the whole
    output to a file (:attr:`ToolOutput.spool_path`) rather than hold it in memory."""
    time_limit_seconds: float | None = None
    """The time limit the runner enforces on this call (None: none). At the limit the
    executor's task is cancelled; work it handed to a thread cannot be cancelled and must
    stop by this limit on its own (see "Writing tools" in the README)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolOutput:
    content: str
    media_type: str = "text/plain"
    failed: bool = False
    """True when the tool ran but reports failure (e.g. a command exited non-zero)."""
    spool_path: str | None = None
    """The whole output, when the tool wrote it to a temporary file instead of holding it
    in memory (``content`` is then a capped view). The runner moves the file into an
    artifact and removes it."""


class ToolExecutor(Protocol):
    """Runs a call. Raise :class:`~plait.domain.errors.ToolError` for failures the model
    should read; any other exception is reported as an internal tool failure."""

    async def __call__(self, invocation: ToolInvocation) -> ToolOutput: ...


@dataclass(frozen=True, slots=True, kw_only=True)
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
