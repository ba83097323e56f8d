"""A sub-agent's run is traced in its parent's trace (issue 28 item 2: visible in the
traces): its root span is a child of the parent's ``execute_tool delegate_NAME`` span and
names the parent call; its model and tool spans follow under it."""

from __future__ import annotations

from typing import Any

from plait.adapters.stores.memory.store import MemoryStore
from plait.domain.runs import Budget, RunStatus
from plait.runtime import Runtime
from plait.testing import FixedClock, FunctionModel, SequentialIds
from tests.application.conftest import run
from tests.application.test_subagents import COUNTER, Agents, tally_tool
from tests.telemetry.conftest import Otel, parent_id


def attrs(span: Any) -> dict[str, Any]:
    return dict(span.attributes or {})


def test_a_child_run_is_traced_under_the_parents_delegating_call(otel: Otel) -> None:
    store, tally = MemoryStore(), tally_tool()
    rt = Runtime(
        store=store,
        artifacts=store,
        model=FunctionModel(Agents(), name="fn"),
        tools=[tally.tool],
        clock=FixedClock(),
        ids=SequentialIds(),
        owner="worker",
        subagents=[COUNTER],
        budget=Budget(max_model_calls=20),
        telemetry=otel.telemetry,
    )
    session = run(rt.service.create_session())
    result = run(rt.service.send(session.id, "count the apples"))
    assert result.run.status is RunStatus.COMPLETED
    spans = otel.finished()
    roots = [s for s in spans if s.name == "plait.run"]
    parent_root = next(s for s in roots if attrs(s)["plait.run.id"] == result.run.id)
    child_root = next(s for s in roots if s is not parent_root)
    (delegate,) = [s for s in spans if s.name == "execute_tool delegate_counter"]
    assert child_root.context.trace_id == parent_root.context.trace_id
    assert parent_id(child_root) == delegate.context.span_id
    assert attrs(child_root)["plait.parent.run_id"] == result.run.id
    assert attrs(child_root)["plait.parent.call_id"] == "d1"
    assert attrs(child_root)["plait.subagent"] == "counter"
    (tally_span,) = [s for s in spans if s.name == "execute_tool tally"]
    assert tally_span.context.trace_id == parent_root.context.trace_id
    child_segment = next(
        s
        for s in spans
        if s.name == "invoke_agent plait"
        and attrs(s)["plait.run.id"] == attrs(child_root)["plait.run.id"]
    )
    assert parent_id(child_segment) == child_root.context.span_id
