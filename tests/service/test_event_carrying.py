"""A worker's event sink as an :class:`~plait.application.ports.EventCarrier`: a run's
commit takes the run's pending events (one transaction for the step and its events), the
run's later events wait until that commit settles, a failed commit's events are written
on their own before any later one, and events wait ``hold`` for a commit to carry them
unless the run is over."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence

from plait.application.events import RunEvent
from plait.application.worker import _EventSink
from plait.domain.service import EventType, NewRunEvent, RunEventRecord


class Queue:
    """Records each batch write; numbers events per run; ``gate`` holds writes open."""

    def __init__(self) -> None:
        self.writes: list[dict[str, list[int]]] = []
        self.last: dict[str, int] = {}
        self.gate: asyncio.Event | None = None

    async def append_run_events_batch(
        self,
        batch: Mapping[str, Sequence[NewRunEvent]],
        *,
        lease_tokens: Mapping[str, int] | None = None,
    ) -> dict[str, list[RunEventRecord]]:
        self.writes.append({r: [int(e.data["n"]) for e in events] for r, events in batch.items()})
        if self.gate is not None:
            await self.gate.wait()
        return {r: self.number(r, events) for r, events in batch.items()}

    def number(self, run_id: str, events: Sequence[NewRunEvent]) -> list[RunEventRecord]:
        first = self.last.get(run_id, 0) + 1
        self.last[run_id] = first + len(events) - 1
        return [
            RunEventRecord(run_id=run_id, seq=first + i, type=e.type, at=e.at, data=e.data)
            for i, e in enumerate(events)
        ]


def encode(event: RunEvent, at: float) -> list[NewRunEvent]:
    return [NewRunEvent(type=EventType.STEP_STARTED, at=at, data={"n": event})]


def sink(queue: Queue, *, hold: float = 0.0) -> _EventSink:
    made = _EventSink(queue, encode, lambda: 1.0, None, 0.0, lambda run_id: 7)  # type: ignore[arg-type]
    made.hold = hold
    return made


def numbers(events: Sequence[NewRunEvent]) -> list[int]:
    return [int(e.data["n"]) for e in events]


def test_a_commit_takes_the_pending_events_and_later_ones_wait_for_it() -> None:
    async def go() -> None:
        queue = Queue()
        events = sink(queue, hold=3600.0)
        events.start()
        emit = events.observer("r1")
        emit(1)  # type: ignore[arg-type]
        emit(2)  # type: ignore[arg-type]
        taken = events.take("r1", 7)
        assert numbers(taken) == [1, 2]
        emit(3)  # type: ignore[arg-type]
        assert events.take("r1", 7) == ()  # the first ones are being written
        events.finished("r1")
        await asyncio.sleep(0.01)
        assert queue.writes == []  # 3 waits for the commit carrying 1 and 2
        events.settle("r1", queue.number("r1", taken))
        await asyncio.wait_for(events.drain("r1"), 5)
        assert queue.writes == [{"r1": [3]}] and queue.last == {"r1": 3}
        assert events.carried == 2
        await events.close()

    asyncio.run(go())


def test_a_failed_commits_events_are_written_alone_before_later_ones() -> None:
    async def go() -> None:
        queue = Queue()
        events = sink(queue, hold=3600.0)
        events.start()
        emit = events.observer("r1")
        emit(1)  # type: ignore[arg-type]
        taken = events.take("r1", 7)
        emit(2)  # type: ignore[arg-type]
        events.settle("r1", None)  # the commit was refused: nothing of it written
        await asyncio.wait_for(events.drain("r1"), 5)
        assert numbers(taken) == [1] and queue.writes == [{"r1": [1, 2]}]
        assert events.carried == 0
        await events.close()

    asyncio.run(go())


def test_nothing_is_taken_while_the_sink_writes_the_run_or_under_another_token() -> None:
    async def go() -> None:
        queue = Queue()
        queue.gate = asyncio.Event()
        events = sink(queue)  # no hold: written at once
        events.start()
        emit = events.observer("r1")
        emit(1)  # type: ignore[arg-type]
        await asyncio.sleep(0.01)
        assert queue.writes == [{"r1": [1]}]  # in flight
        emit(2)  # type: ignore[arg-type]
        assert events.take("r1", 7) == ()  # 2 goes after 1: not in a commit now
        assert events.take("r1", 8) == ()
        queue.gate.set()
        await asyncio.wait_for(events.drain(), 5)
        assert queue.writes == [{"r1": [1]}, {"r1": [2]}]
        await events.close()

    asyncio.run(go())


def test_events_wait_for_a_commit_only_for_the_hold() -> None:
    async def go() -> None:
        queue = Queue()
        events = sink(queue, hold=0.05)
        events.start()
        events.observer("r1")(1)  # type: ignore[arg-type]
        await asyncio.sleep(0.01)
        assert queue.writes == []  # waiting for the run's next commit
        await asyncio.wait_for(events.drain("r1"), 5)  # none came: written by the sink
        assert queue.writes == [{"r1": [1]}]
        await events.close()
        events = sink(queue, hold=3600.0)
        events.start()
        events.observer("r2")(2)  # type: ignore[arg-type]
        events.finished("r2")  # the run is over: no commit will come, no hold
        await asyncio.wait_for(events.drain("r2"), 5)
        assert queue.writes[-1] == {"r2": [2]}
        events.observer("r3")(3)  # type: ignore[arg-type]
        await asyncio.wait_for(events.close(), 5)  # a shutdown waits for no hold
        assert queue.writes[-1] == {"r3": [3]}

    asyncio.run(go())
