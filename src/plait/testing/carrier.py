"""A recording :class:`~plait.application.ports.EventCarrier` (what a worker's event sink
is to a store that writes a run's pending events inside its commits)."""

from __future__ import annotations

from collections.abc import Sequence

from plait.domain.service import NewRunEvent, RunEventRecord

__all__ = ["RecordingCarrier"]


class RecordingCarrier:
    """Holds events per run under one lease token; records what was taken and settled."""

    def __init__(self) -> None:
        self.pending: dict[str, tuple[int, list[NewRunEvent]]] = {}
        self.taken: list[tuple[str, int]] = []
        self.settled: list[tuple[str, list[RunEventRecord] | None]] = []

    def hold(self, run_id: str, lease_token: int, *events: NewRunEvent) -> None:
        self.pending.setdefault(run_id, (lease_token, []))[1].extend(events)

    def take(self, run_id: str, lease_token: int) -> tuple[NewRunEvent, ...]:
        self.taken.append((run_id, lease_token))
        token, events = self.pending.get(run_id, (lease_token, []))
        if token != lease_token or not events:
            return ()
        del self.pending[run_id]
        return tuple(events)

    def settle(self, run_id: str, records: Sequence[RunEventRecord] | None) -> None:
        self.settled.append((run_id, None if records is None else list(records)))
