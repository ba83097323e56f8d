"""Ports of one tool call: the invocation an executor gets and the output it returns
(what a run needs when it calls a tool; the tools themselves are in :mod:`.tools`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from plait.domain.record import record

if TYPE_CHECKING:
    from plait.domain.messages import ToolCall

__all__ = [
    "ToolInvocation",
    "ToolOutput",
]


@record(kw_only=True)
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


@record(kw_only=True)
class ToolOutput:
    content: str
    media_type: str = "text/plain"
    failed: bool = False
    """True when the tool ran but reports failure (e.g. a command exited non-zero)."""
    spool_path: str | None = None
    """The whole output, when the tool wrote it to a temporary file instead of holding it
    in memory (``content`` is then a capped view). The runner moves the file into an
    artifact and removes it."""
