"""Through the real recovery path: a process dies while a side-effecting call runs;
recovery settles the call ``unknown`` and the run waits for a person, and in that same
write an ``outcome.unknown`` delivery is queued for the endpoint (the memory store)."""

from __future__ import annotations

import pytest

from plait.application.webhooks import WebhookService
from plait.domain.runs import RunStatus
from plait.domain.webhooks import DeliveryStatus
from plait.testing import FixedClock, SequentialIds
from tests.application.conftest import make_rig, reply, run
from tests.application.test_recovery import Died, _script, _tools, die_at


def test_an_unknown_outcome_after_recovery_queues_its_delivery() -> None:
    clock = FixedClock()
    log: list[str] = []
    reader, writer = _tools(log)
    first = make_rig(
        _script(), [reader, writer], clock=clock, checkpoint=die_at("tool_returned", 2)
    )
    store = first.store
    hooks = WebhookService(store=store, clock=clock, ids=SequentialIds())
    endpoint = run(hooks.add("http://127.0.0.1:9/", ["outcome.unknown"], principal=None))
    session = run(first.service.create_session())
    with pytest.raises(Died):
        run(first.service.send(session.id, "go"))
    assert run(hooks.deliveries(principal=None)) == []  # nothing is unknown yet
    clock.advance(61)
    reader2, writer2 = _tools(log)
    second = make_rig(
        [reply("noted")],
        [reader2, writer2],
        store=store,
        clock=clock,
        ids=SequentialIds(start=1000),
    )
    second.service.owner = "worker-2"
    (report,) = run(second.service.recover())
    assert report.result is not None
    assert report.result.run.status is RunStatus.AWAITING_RESOLUTION
    [delivery] = run(hooks.deliveries(principal=None, endpoint_id=endpoint.id))
    assert delivery.event_type == "outcome.unknown"
    assert delivery.status is DeliveryStatus.PENDING
    [job] = run(store.claim_deliveries(owner="w", now=clock.now(), expires_at=1e12, limit=5))
    assert job.event.data["run_id"] == report.result.run.id
    assert job.event.data["status"] == "awaiting_resolution"
