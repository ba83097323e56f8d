"""Liveness: the heartbeat renews the lease on its own; a process that lost its lease
stops at its next commit with a clear message and writes nothing more."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from plait.adapters.stores.memory.store import MemoryStore
from plait.application.ports import ToolInvocation, ToolOutput
from plait.domain.errors import LeaseLostError, StoreError
from plait.domain.runs import Run
from plait.domain.tools import EffectClass
from plait.testing import FixedClock, RecordingTool
from tests.application.conftest import call, make_rig, reply, run, shape, spec


def _stolen_while_working(
    store: MemoryStore, clock: FixedClock, stolen: asyncio.Event, interrupted: asyncio.Event
) -> Any:
    """A tool whose run another process takes over as it starts (``stolen``), then works
    for 30 s unless interrupted (``interrupted``)."""

    async def steal_then_work(inv: ToolInvocation) -> ToolOutput:
        # another process recovers the run, as if its lease had expired
        await store.claim_run(
            inv.run_id, owner="thief", now=clock.now() + 3600, expires_at=clock.now() + 7200
        )
        stolen.set()
        try:
            await asyncio.sleep(30)  # interrupted by the heartbeat that finds the lease gone
        except asyncio.CancelledError:
            interrupted.set()
            raise
        return ToolOutput(content="never")

    return steal_then_work


def test_a_process_that_lost_its_lease_stops_at_its_next_commit() -> None:
    store, clock = MemoryStore(), FixedClock()
    stolen, interrupted = asyncio.Event(), asyncio.Event()
    work = _stolen_while_working(store, clock, stolen, interrupted)
    tool = RecordingTool(spec("slow", EffectClass.READ_ONLY), fn=work)
    rig = make_rig(
        [reply("", call("slow", {"text": "a"}, "c1")), reply("never")],
        [tool],
        store=store,
        clock=clock,
        lease_seconds=0.03,
    )
    s = run(rig.service.create_session())
    with pytest.raises(LeaseLostError, match="lost the run's lease"):
        run(rig.service.send(s.id, "go"))
    assert stolen.is_set() and interrupted.is_set()
    rows = shape(rig.history(s.id))
    assert [r[1] for r in rows] == ["user", "assistant"]  # nothing written after the loss
    (stored,) = run(store.list_runs())
    assert stored.lease is not None and stored.lease.owner == "thief"


class Renewals(MemoryStore):
    """Counts the lease renewals tried and made; the first ``failing`` of them fail as a
    busy store."""

    def __init__(self, failing: int = 0) -> None:
        super().__init__()
        self.failing, self.failures, self.renewals, self.attempts = failing, 0, 0, 0
        self.renewed = asyncio.Event()

    async def renew_lease(
        self, run_id: str, *, owner: str, expires_at: float, lease_token: int | None = None
    ) -> None:
        self.attempts += 1
        if self.failures < self.failing:
            self.failures += 1
            raise StoreError("database is busy")
        await super().renew_lease(
            run_id, owner=owner, expires_at=expires_at, lease_token=lease_token
        )
        self.renewals += 1
        self.renewed.set()


def test_the_heartbeat_survives_a_failed_renewal() -> None:
    store = Renewals(failing=2)

    async def wait_for_renewal(inv: ToolInvocation) -> str:
        await store.renewed.wait()
        return "renewed"

    tool = RecordingTool(spec("wait"), fn=wait_for_renewal)
    rig = make_rig(
        [reply("", call("wait", {"text": "a"}, "c1")), reply("done")],
        [tool],
        store=store,
        lease_seconds=0.03,
    )
    s = run(rig.service.create_session())
    result = run(rig.service.send(s.id, "go"))
    assert result.run.status.value == "completed"
    assert store.failures == 2 and store.renewed.is_set()


def _working(clock: FixedClock, seconds: float) -> Any:
    async def work(inv: ToolInvocation) -> ToolOutput:
        await asyncio.sleep(seconds)
        clock.advance(seconds)  # the wall clock the leases are written in moves as well
        return ToolOutput(content="done")

    return work


def test_steps_that_commit_often_keep_the_lease_without_renewals() -> None:
    store, clock = Renewals(), FixedClock()
    tool = RecordingTool(spec("work", EffectClass.READ_ONLY), fn=_working(clock, 0.06))
    steps = [reply("", call("work", {"text": str(n)}, f"c{n}")) for n in range(40)]
    rig = make_rig([*steps, reply("done")], [tool], store=store, clock=clock, lease_seconds=3.0)
    s = run(rig.service.create_session())
    result = run(rig.service.send(s.id, "go"))
    assert result.run.status.value == "completed"
    # ~2.4 s, a beat every second, each less than half a second after a step's commit
    assert len(tool.finished) == 40 and store.renewals == 0


class FailingReads(Renewals):
    """:class:`Renewals` whose reads of a run fail as a busy store's, every one."""

    async def get_run(self, run_id: str) -> Run:
        raise StoreError("database is busy")


def test_a_failed_check_of_the_lease_is_retried_and_said_as_such(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store, clock = FailingReads(), FixedClock()
    tool = RecordingTool(spec("work", EffectClass.READ_ONLY), fn=_working(clock, 0.06))
    steps = [reply("", call("work", {"text": str(n)}, f"c{n}")) for n in range(25)]
    rig = make_rig([*steps, reply("done")], [tool], store=store, clock=clock, lease_seconds=3.0)
    s = run(rig.service.create_session())
    with caplog.at_level(logging.WARNING, logger="plait.agent"):
        result = run(rig.service.send(s.id, "go"))
    assert result.run.status.value == "completed"  # the run goes on: its commits keep it
    said = [r.getMessage() for r in caplog.records if "lease" in r.getMessage()]
    assert said and all("lease check failed (database is busy)" in m for m in said)
    assert store.attempts == 0


def test_a_call_that_outlasts_a_beat_is_still_renewed() -> None:
    store, clock = Renewals(), FixedClock()
    tool = RecordingTool(spec("work", EffectClass.READ_ONLY), fn=_working(clock, 2.3))
    rig = make_rig(
        [reply("", call("work", {"text": "a"}, "c1")), reply("done")],
        [tool],
        store=store,
        clock=clock,
        lease_seconds=3.0,
    )
    s = run(rig.service.create_session())
    result = run(rig.service.send(s.id, "go"))
    assert result.run.status.value == "completed"
    assert store.renewals >= 2  # the beats at 1 and 2 s: no commit since the call began


def test_a_takeover_between_a_commit_and_the_next_beat_is_noticed_at_that_beat() -> None:
    """A beat soon after a step's commit renews nothing; it still finds the run claimed by
    force since then (a read of the run's token), without waiting for a later beat."""
    store, clock = Renewals(), FixedClock()
    stolen, interrupted = asyncio.Event(), asyncio.Event()

    async def tick(inv: ToolInvocation) -> ToolOutput:
        clock.advance(0.1)  # the next step's commit writes a later expiry than the start's
        return ToolOutput(content="ticked")

    # taken over as by `--force`: the lease the step's commit set has not expired
    work = _stolen_while_working(store, clock, stolen, interrupted)
    tools = [
        RecordingTool(spec("tick", EffectClass.READ_ONLY), fn=tick),
        RecordingTool(spec("slow", EffectClass.READ_ONLY), fn=work),
    ]
    rig = make_rig(
        [
            reply("", call("tick", {"text": "a"}, "c1")),
            reply("", call("slow", {"text": "b"}, "c2")),
            reply("never"),
        ],
        tools,
        store=store,
        clock=clock,
        lease_seconds=3.0,  # a beat every second; the commit's lease is fresh at the first
    )
    s = run(rig.service.create_session())
    with pytest.raises(LeaseLostError, match="lost the run's lease"):
        run(rig.service.send(s.id, "go"))
    assert interrupted.is_set()
    assert store.attempts == 0  # found by the first beat's read, not by a renewal at the second
    kinds = [r[1] for r in shape(rig.history(s.id))]
    assert kinds == ["user", "assistant", "tool_result", "assistant"]  # nothing after the loss
