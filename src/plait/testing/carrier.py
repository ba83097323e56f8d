"""A recording :class:`~plait.application.ports.EventCarrier` (what a worker's event sink
is to a store that writes pending run events inside its commits)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from plait.application.ports import CarriedEvents
from plait.domain.service import NewRunEvent, RunEventRecord

__all__ = ["RecordingCarrier"]


class RecordingCarrier:
    """Holds events per run, each run's under one lease token, and gives all of them to
    the next commit; records what was asked and settled."""

    def __init__(self) -> None:
        self.pending: dict[str, tuple[int, list[NewRunEvent]]] = {}
        self.asked: list[tuple[str, int]] = []
        self.settled: list[tuple[CarriedEvents, dict[str, list[RunEventRecord]] | None]] = []

    def hold(self, run_id: str, lease_token: int, *events: NewRunEvent) -> None:
        token, held = self.pending.get(run_id, (lease_token, []))
        self.pending[run_id] = (lease_token, (held if token == lease_token else []) + [*events])

    def take(self, run_id: str, lease_token: int) -> CarriedEvents:
        self.asked.append((run_id, lease_token))
        carried = CarriedEvents(
            {r: tuple(events) for r, (_, events) in self.pending.items()},
            {r: token for r, (token, _) in self.pending.items()},
        )
        self.pending.clear()
        return carried

    def settle(
        self, carried: CarriedEvents, written: Mapping[str, Sequence[RunEventRecord]] | None
    ) -> None:
        got = None if written is None else {r: list(w) for r, w in written.items()}
        self.settled.append((carried, got))
