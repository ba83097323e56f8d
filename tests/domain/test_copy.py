"""Copies of frozen records by their slots (plait.domain._copy): the same values as
``dataclasses.replace``, and ``replace`` itself where ``__init__`` does more."""

from __future__ import annotations

import dataclasses

import pytest

from plait.domain._copy import copier
from plait.domain.errors import ValidationError
from plait.domain.messages import ToolStatus
from plait.domain.runs import Budget, Lease, Run, RunStatus, RunUsage
from plait.domain.session import ExecutionRecord, ExecutionState
from plait.domain.tools import EffectClass


def record() -> ExecutionRecord:
    return ExecutionRecord(
        session_id="ses_1",
        run_id="run_1",
        call_id="call_1",
        tool_name="echo",
        effect=EffectClass.READ_ONLY,
        args_digest="sha256:00",
        idempotency_key="idem_1",
        state=ExecutionState.REQUESTED,
        requested_at=1.5,
        note="kept",
    )


def test_a_record_moves_forward_as_replace_would_move_it() -> None:
    requested = record()
    started = requested.decided(ExecutionState.STARTED, 2.0, "allow", "default", "fine")
    assert started == dataclasses.replace(
        requested,
        state=ExecutionState.STARTED,
        reviewed_at=2.0,
        started_at=2.0,
        decision="allow",
        decided_by="default",
        decision_reason="fine",
    )
    reviewed = requested.decided(ExecutionState.REVIEWED, 2.0, "deny", "policy", None)
    assert reviewed.started_at is None and reviewed.reviewed_at == 2.0
    settled = started.settled(3.0, ToolStatus.SUCCEEDED)
    assert settled == dataclasses.replace(
        started, state=ExecutionState.SETTLED, settled_at=3.0, result_status=ToolStatus.SUCCEEDED
    )
    assert hash(settled) == hash(dataclasses.replace(settled))
    with pytest.raises(dataclasses.FrozenInstanceError):
        settled.note = "changed"  # type: ignore[misc]
    assert requested.state is ExecutionState.REQUESTED  # the original is untouched


def test_a_run_steps_as_replace_would_step_it() -> None:
    run = Run(
        id="run_1",
        session_id="ses_1",
        status=RunStatus.RUNNING,
        budget=Budget(),
        started_at=1.0,
        model="fake",
        mcp_servers=("git",),
    )
    usage = RunUsage(steps=1, model_calls=1)
    lease = Lease(owner="me", expires_at=30.0)
    assert run.stepped(usage, lease) == dataclasses.replace(run, usage=usage, lease=lease)
    assert run.stepped(usage, None).lease is None


def test_a_class_whose_init_checks_its_fields_is_copied_by_replace() -> None:
    tighter = copier(Budget, ("max_steps",))
    assert tighter(Budget(), 5) == Budget(max_steps=5)
    with pytest.raises(ValidationError, match="max_steps"):
        tighter(Budget(), 0)  # __post_init__ ran


def test_a_name_that_is_not_a_field_is_refused() -> None:
    with pytest.raises(TypeError):
        copier(ExecutionRecord, ("no_such_field",))(record(), 1)


def test_the_values_must_match_the_changed_fields() -> None:
    with pytest.raises(ValueError, match="zip"):
        copier(ExecutionRecord, ("note", "state"))(record(), "only one")
