"""A worker's event sink as an :class:`~plait.application.ports.EventCarrier`: a commit of
one of its runs takes the pending events of its runs (one transaction for the step and
the events), a run's later events wait until that commit settles, a failed commit's
events are written on their own before any later one, and events wait ``hold`` for a
commit to carry them unless the run ends with no other run driven."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence

from plait.application.events import RunEvent
from plait.application.ports import CarriedEvents
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


def numbers(carried: CarriedEvents) -> dict[str, list[int]]:
    return {r: [int(e.data["n"]) for e in events] for r, events in carried.events.items()}


def test_a_commit_takes_the_pending_events_and_later_ones_wait_for_it() -> None:
    async def go() -> None:
        queue = Queue()
        events = sink(queue, hold=3600.0)
        events.start()
        emit = events.observer("r1")
        emit(1)  # type: ignore[arg-type]
        emit(2)  # type: ignore[arg-type]
        events.observer("r2")(10)  # type: ignore[arg-type]
        taken = events.take("r1", 7)
        assert numbers(taken) == {"r1": [1, 2], "r2": [10]} and taken.tokens == {"r1": 7, "r2": 7}
        emit(3)  # type: ignore[arg-type]
        assert not events.take("r2", 7)  # the first ones are being written
        events.finished("r1")
        await asyncio.sleep(0.01)
        assert queue.writes == []  # 3 waits for the commit carrying 1 and 2
        written = {r: queue.number(r, e) for r, e in taken.events.items()}
        events.settle(taken, written)
        await asyncio.wait_for(events.drain("r1"), 5)
        assert queue.writes == [{"r1": [3]}] and queue.last == {"r1": 3, "r2": 1}
        assert events.carried == 3
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
        events.settle(taken, None)  # the commit was refused: nothing of it written
        await asyncio.wait_for(events.drain("r1"), 5)
        assert numbers(taken) == {"r1": [1]} and queue.writes == [{"r1": [1, 2]}]
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
        assert not events.take("r1", 7)  # 2 goes after 1: not in a commit now
        queue.gate.set()
        await asyncio.wait_for(events.drain(), 5)
        emit(3)  # type: ignore[arg-type]
        assert not events.take("r1", 8)  # the committing run's, under another token
        await asyncio.wait_for(events.drain(), 5)
        assert queue.writes == [{"r1": [1]}, {"r1": [2]}, {"r1": [3]}]
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
