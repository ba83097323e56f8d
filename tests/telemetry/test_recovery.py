"""Recovery's own span: ``recover_run`` in the segment that takes a run over, saying how
the open calls of its last persisted point are settled (run again, run again with the same
idempotency key, settled ``unknown``, never started), linked to the stretch it continues."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import StatusCode

from plait.adapters.stores.memory.store import MemoryStore
from plait.application.ports import ModelResponse
from plait.domain.runs import RunStatus
from plait.domain.tools import EffectClass
from plait.testing import FixedClock, RecordingTool, SequentialIds
from tests.application.conftest import call, make_rig, reply, run, spec
from tests.telemetry.conftest import Otel


class Died(BaseException):
    """Stands for the process dying at a checkpoint."""


def die_at(point: str, nth: int) -> Callable[[str], None]:
    seen = {"n": 0}

    def hook(name: str) -> None:
        if name == point:
            seen["n"] += 1
            if seen["n"] == nth:
                raise Died(point)

    return hook


def tools() -> list[RecordingTool]:
    return [
        RecordingTool(spec("read"), output="content"),
        RecordingTool(spec("put", EffectClass.IDEMPOTENT), output="stored"),
        RecordingTool(spec("append", EffectClass.SIDE_EFFECT), output="appended"),
    ]


def crash_then_recover(
    otel: Otel, first_turn: ModelResponse, point: str, nth: int
) -> tuple[RunStatus, list[ReadableSpan]]:
    """The first process (telemetry on) dies at ``point``; once its lease expired another
    one recovers the run."""
    store, clock = MemoryStore(), FixedClock()
    first = make_rig(
        [first_turn, reply("all done")],
        tools(),
        store=store,
        clock=clock,
        checkpoint=die_at(point, nth),
        telemetry=otel.telemetry,
    )
    session = run(first.service.create_session())
    with pytest.raises(Died):
        run(first.service.send(session.id, "go"))
    clock.advance(61)  # the dead owner's lease expires
    second = make_rig(
        [reply("all done")],
        tools(),
        store=store,
        clock=clock,
        ids=SequentialIds(start=1000),
        telemetry=otel.telemetry,
    )
    second.service.owner = "worker-2"
    (report,) = run(second.service.recover())
    assert report.result is not None
    return report.result.run.status, otel.finished()


def attrs(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


def recovery(spans: list[ReadableSpan]) -> tuple[ReadableSpan, ReadableSpan]:
    (recovered,) = [s for s in spans if attrs(s).get("plait.run.segment") == "recovered"]
    (span,) = [s for s in spans if s.name == "recover_run"]
    assert span.parent is not None and span.parent.span_id == recovered.context.span_id
    assert recovered.links and [link.context for link in span.links] == [
        recovered.links[0].context
    ]  # the stretch it continues: the run's stored trace
    return recovered, span


def test_an_idempotent_call_run_again_and_a_call_never_started(otel: Otel) -> None:
    turn = reply("", call("put", {"text": "k"}, "c1"), call("append", {"text": "x"}, "c2"))
    status, spans = crash_then_recover(otel, turn, "tool_returned", 1)  # c1's result unsaved
    assert status is RunStatus.COMPLETED
    _, span = recovery(spans)
    counts = attrs(span)
    assert counts["plait.recovery.pending_calls"] == 2
    assert counts["plait.recovery.reexecuted_idempotent"] == 1
    assert counts["plait.recovery.not_started"] == 1
    assert counts["plait.recovery.rerun"] == counts["plait.recovery.settled_unknown"] == 0
    assert counts["plait.run.status"] == "running"
    assert span.status.status_code is StatusCode.UNSET
    under = sorted(s.name for s in spans if s.parent is not None and s.parent == span.context)
    assert under == ["execute_tool append", "execute_tool put"]


def test_a_side_effect_that_had_started_is_settled_unknown(otel: Otel) -> None:
    turn = reply("", call("read", {"text": "a"}, "c1"), call("append", {"text": "x"}, "c2"))
    status, spans = crash_then_recover(otel, turn, "tool_returned", 2)  # c2 acted, unsaved
    assert status is RunStatus.AWAITING_RESOLUTION
    recovered, span = recovery(spans)
    counts = attrs(span)
    assert counts["plait.recovery.pending_calls"] == 1
    assert counts["plait.recovery.settled_unknown"] == 1
    assert counts["plait.recovery.rerun"] == counts["plait.recovery.reexecuted_idempotent"] == 0
    assert counts["plait.run.status"] == "awaiting_resolution"
    assert span.status.status_code is StatusCode.UNSET  # waiting for a person is no error
    assert attrs(recovered)["plait.run.status"] == "awaiting_resolution"


def test_a_run_driven_from_its_start_has_no_recovery_span(otel: Otel) -> None:
    turn = reply("", call("read", {"text": "a"}, "c1"))
    rig = make_rig([turn, reply("done")], tools(), telemetry=otel.telemetry)
    session = run(rig.service.create_session())
    assert run(rig.service.send(session.id, "go")).run.status is RunStatus.COMPLETED
    assert not [s for s in otel.finished() if s.name == "recover_run"]
