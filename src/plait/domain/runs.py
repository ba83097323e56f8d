"""Runs: one user request carried through the loop, with its budget and status."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from plait.domain._copy import copier
from plait.domain.errors import ValidationError
from plait.domain.record import record
from plait.domain.run_status import RunStatus

if TYPE_CHECKING:
    from plait.domain.answers import OutputSchema
    from plait.domain.subagents import ParentCall

__all__ = ["Budget", "Lease", "Run", "RunError", "RunStatus", "RunUsage"]


@record(kw_only=True)
class Budget:
    """Limits of one run. ``None`` means no limit for that dimension.

    Every model call counts against ``max_model_calls``: assistant turns, correction
    requests, and (later) reviewer and summarizer calls.
    """

    max_steps: int | None = 50
    deadline_seconds: float | None = 600.0
    max_model_calls: int | None = 100
    max_total_tokens: int | None = None
    max_corrections: int = 2
    tool_timeout_seconds: float | None = 60.0
    tool_output_cap_bytes: int = 32_000
    max_cost_usd: float | None = None
    """Ceiling on the run's model spend, from the model's declared prices (a model without
    prices cannot take a ceiling)."""

    def __post_init__(self) -> None:
        for name in ("max_steps", "max_model_calls", "max_total_tokens"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or value < 1):
                raise ValidationError(f"budget {name} must be a positive integer or None")
        for name in ("deadline_seconds", "tool_timeout_seconds", "max_cost_usd"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int | float) or value <= 0):
                raise ValidationError(f"budget {name} must be a positive number or None")
        if not isinstance(self.max_corrections, int) or self.max_corrections < 0:
            raise ValidationError("budget max_corrections must be a non-negative integer")
        if not isinstance(self.tool_output_cap_bytes, int) or self.tool_output_cap_bytes < 256:
            raise ValidationError("budget tool_output_cap_bytes must be an integer >= 256")


@record(kw_only=True)
class RunUsage:
    steps: int = 0
    model_calls: int = 0
    corrections: int = 0
    tool_calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    def counts(self) -> tuple[int, int, int, int, int, int]:
        """The counters in field order: steps, model calls, corrections, tool calls,
        input tokens, output tokens."""
        return (
            self.steps,
            self.model_calls,
            self.corrections,
            self.tool_calls,
            self.input_tokens,
            self.output_tokens,
        )


@record(kw_only=True)
class RunError:
    """Why a run did not complete: a stable code and a message for people."""

    code: str
    message: str


@record(kw_only=True)
class Lease:
    owner: str
    expires_at: float


@record(kw_only=True)
class Run:
    id: str
    session_id: str
    status: RunStatus
    budget: Budget
    started_at: float
    model: str = ""
    usage: RunUsage = RunUsage()
    ended_at: float | None = None
    error: RunError | None = None
    lease: Lease | None = None
    cancel_requested: bool = False
    model_spec: str | None = None
    """How to open the model again (``plait.runtime.open_model``), when known: recovery and
    resume continue the run with the model it was started with."""
    deadline_at: float | None = None
    """The deadline as an absolute wall-clock time (epoch seconds): set when the run
    starts, kept through a crash and recovery; set anew when a person resumes it."""
    lease_token: int = 0
    """The fencing token of the run's last claim, kept by the store: every claim or
    take-over of the run (by any process, the same owner's too) makes it one higher. A
    writer keeps the token its claim returned and every write of the run carries it; a
    store refuses a write whose token is not the stored one (the run was taken over
    since), whatever the lease looks like now."""
    policy: str | None = None
    """The tool policy (its source, e.g. a file path) of the process that last started or
    continued the run, which decides its calls from then on (after an approval too);
    ``None``: no governing policy, or a run recorded before plait kept this."""
    trace_context: str | None = None
    """The W3C ``traceparent`` of the span that began the run's trace (telemetry on): a
    process that continues the run (recovery, a worker's claim, a resume after an
    approval) opens its span in that trace, linked to it. ``None``: no trace recorded."""
    output_schema: OutputSchema | None = None
    """The schema the run's final answer must match (a typed answer), or None."""
    parent: ParentCall | None = None
    """A sub-agent's run: the parent run's call it answers (None for a top-level run)."""
    mcp_servers: tuple[str, ...] | None = None
    """The MCP servers (configured names) whose tools the run is offered, chosen when it
    was sent; a process that continues it offers those of them it has. ``None``: every
    server of the process that drives it."""

    def with_usage(self, **changes: int) -> Run:
        return replace(self, usage=replace(self.usage, **changes))

    def ended(self, status: RunStatus, at: float, error: RunError | None = None) -> Run:
        return replace(self, status=status, ended_at=at, error=error, lease=None)

    def stepped(self, usage: RunUsage, lease: Lease | None) -> Run:
        """The run with its usage after a step and its lease renewed: ``dataclasses.
        replace`` with these fields, by the slots (a run moves forward at every step)."""
        return _stepped(self, usage, lease)


_stepped = copier(Run, ("usage", "lease"))
