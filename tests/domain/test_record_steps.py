"""The steps a run's records take at every step (an execution record reviewed, then
settled; a run's usage and lease after a step) are built directly, not through
``dataclasses.replace``: each must give what ``replace`` gives, every other field kept.
The values below set every field away from its default, so a field added later and not
carried by these methods makes the comparison fail (and so does a new field left at its
default here: the first check of each test)."""

from __future__ import annotations

import dataclasses
from typing import Any

from plait.domain.answers import OutputSchema
from plait.domain.messages import ToolStatus
from plait.domain.runs import Budget, Lease, Run, RunError, RunStatus, RunUsage
from plait.domain.session import ExecutionRecord, ExecutionState
from plait.domain.subagents import ParentCall
from plait.domain.tools import EffectClass


def assert_no_default(value: Any) -> None:
    for field in dataclasses.fields(value):
        if field.default is not dataclasses.MISSING:
            assert getattr(value, field.name) != field.default, field.name
        if field.default_factory is not dataclasses.MISSING:
            assert getattr(value, field.name) != field.default_factory(), field.name


RECORD = ExecutionRecord(
    session_id="s1",
    run_id="r1",
    call_id="c1",
    tool_name="shell",
    effect=EffectClass.SIDE_EFFECT,
    args_digest="sha256:abc",
    idempotency_key="s1:r1:c1",
    state=ExecutionState.REQUESTED,
    requested_at=1_000.5,
    reviewed_at=1_000.75,
    started_at=1_000.875,
    settled_at=1_001.0,
    result_status=ToolStatus.UNKNOWN,
    decision="needs_approval",
    decided_by="person",
    decision_reason="asked",
    note="it was checked by hand",
)

RUN = Run(
    id="r1",
    session_id="s1",
    status=RunStatus.RUNNING,
    budget=Budget(max_steps=9),
    started_at=1_000.0,
    model="m",
    usage=RunUsage(steps=2, model_calls=3),
    ended_at=1_500.0,
    error=RunError(code="c", message="m"),
    lease=Lease(owner="w1", expires_at=2_000.0),
    cancel_requested=True,
    model_spec="openai:gpt-x",
    deadline_at=1_600.0,
    lease_token=4,
    policy="rules: []",
    trace_context="00-abc-def-01",
    output_schema=OutputSchema.create({"type": "object"}, name="answer"),
    parent=ParentCall(session_id="s0", run_id="r0", call_id="c0", agent="helper"),
    mcp_servers=("fs",),
)


def test_a_record_reviewed_keeps_every_other_field() -> None:
    assert_no_default(RECORD)
    for state, started in ((ExecutionState.STARTED, 7.0), (ExecutionState.REVIEWED, None)):
        assert RECORD.decided(state, 7.0, "allow", "policy", "why") == dataclasses.replace(
            RECORD,
            state=state,
            reviewed_at=7.0,
            started_at=started,
            decision="allow",
            decided_by="policy",
            decision_reason="why",
        )
    assert RECORD.decided(ExecutionState.STARTED, 7.0, "allow", None, None).decided_by is None


def test_a_record_settled_keeps_every_other_field() -> None:
    assert_no_default(RECORD)
    assert RECORD.settled(9.0, ToolStatus.SUCCEEDED) == dataclasses.replace(
        RECORD, state=ExecutionState.SETTLED, settled_at=9.0, result_status=ToolStatus.SUCCEEDED
    )


def test_a_run_stepped_keeps_every_other_field() -> None:
    assert_no_default(RUN)
    usage = RunUsage(steps=3, model_calls=4, tool_calls=2)
    lease = Lease(owner="w1", expires_at=2_100.0)
    assert RUN.stepped(usage, lease) == dataclasses.replace(RUN, usage=usage, lease=lease)
    assert RUN.stepped(usage, None) == dataclasses.replace(RUN, usage=usage, lease=None)
