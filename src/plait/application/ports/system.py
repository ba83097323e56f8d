"""Ports to the rest of the machine: the clock, ids, workspace snapshots and leftovers,
and the telemetry of runs."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from plait.application.events import RunEvent
    from plait.domain.forks import WorkspaceSnapshot
    from plait.domain.runs import Run
    from plait.domain.session import Session

__all__ = [
    "Clock",
    "IdGenerator",
    "LeftoverSweeper",
    "RunTelemetry",
    "WorkspaceSnapshots",
]


class Clock(Protocol):
    def now(self) -> float:
        """Wall-clock time, seconds since the epoch (UTC)."""
        ...

    def monotonic(self) -> float:
        """Seconds on a monotonic clock, for deadlines."""
        ...


class IdGenerator(Protocol):
    def new(self, prefix: str) -> str:
        """A fresh id like ``msg_01J...``; unique across processes."""
        ...


class WorkspaceSnapshots(Protocol):
    """Takes explicit workspace snapshots for forks (git work trees only)."""

    def take(self, workspace: str, *, name: str, message: str) -> WorkspaceSnapshot:
        """Commit the working tree (tracked and untracked, not ignored) on a private ref
        without touching the user's index, and check it out as a separate worktree.
        Raises :class:`~plait.domain.errors.ConfigError` for a workspace that is not in a
        git work tree."""
        ...

    def discard(self, snapshot: WorkspaceSnapshot) -> None:
        """Remove the worktree and the ref of a snapshot no branch uses."""
        ...


class LeftoverSweeper(Protocol):
    """Removes what interrupted atomic writes left in a workspace (``.plait-*.tmp`` files
    that a killed process wrote but never renamed into place)."""

    def sweep(self, workspace: str, *, older_than: float) -> list[str]:
        """Remove such files last modified before ``older_than`` (epoch seconds; a live
        writer's fresh temporary file is left alone); return their paths."""
        ...


class RunTelemetry(Protocol):
    """Traces and metrics of runs (docs/design.md#surfaces), e.g. OpenTelemetry. The loop tells it
    when this process begins driving a run (a *segment*: the run's start, or its continuation
    after a crash, a worker's claim or a person's answer), every run event, and when the
    segment stops. Off (``None``), nothing is called."""

    def begin(self, run: Run, how: str) -> str | None:
        """This process starts driving ``run`` (``how``: ``started``, ``queued``,
        ``claimed``, ``recovered``, ``resumed``). Returns the trace context to store with
        the run when it has none yet (else ``None``); a run that has one continues that
        trace, its new span linked to the stored one."""
        ...

    def observe(self, event: RunEvent) -> None:
        """A run event (quick, must not raise)."""
        ...

    def end(self, run: Run, error: BaseException | None = None) -> None:
        """The segment ended: the run ended or waits (``run``'s status says which), or
        ``error`` stopped this process driving it (lease lost, store failure)."""
        ...

    def queue_depth(self, depth: int) -> None:
        """A worker polled the queue and saw ``depth`` queued runs."""
        ...

    def forked(self, source_session_id: str, session: Session, parent_trace: str | None) -> None:
        """A fork created ``session`` from ``source_session_id``; ``parent_trace``: the
        trace context of the source session's latest run, which the fork's span links to."""
        ...
