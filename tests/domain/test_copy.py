"""Copies of frozen records by their slots (plait.domain._copy). That a record's review and
settlement and a run's step give what ``dataclasses.replace`` gives is checked field by
field in test_record_steps; here: what a copy is, and ``replace`` itself where
``__init__`` does more than set fields."""

from __future__ import annotations

import dataclasses

import pytest

from plait.domain._copy import copier
from plait.domain.errors import ValidationError
from plait.domain.messages import ToolStatus
from plait.domain.runs import Budget
from plait.domain.session import ExecutionRecord, ExecutionState
from tests.domain.test_record_steps import RECORD


def test_a_copy_is_a_frozen_value_and_the_original_is_untouched() -> None:
    settled = copier(ExecutionRecord, ("state", "result_status"))(
        RECORD, ExecutionState.SETTLED, ToolStatus.SUCCEEDED
    )
    assert settled == dataclasses.replace(
        RECORD, state=ExecutionState.SETTLED, result_status=ToolStatus.SUCCEEDED
    )
    assert hash(settled) == hash(dataclasses.replace(settled))
    with pytest.raises(dataclasses.FrozenInstanceError):
        settled.note = "changed"  # type: ignore[misc]
    assert RECORD.state is ExecutionState.REQUESTED


def test_a_class_whose_init_checks_its_fields_is_copied_by_replace() -> None:
    tighter = copier(Budget, ("max_steps",))
    assert tighter(Budget(), 5) == Budget(max_steps=5)
    with pytest.raises(ValidationError, match="max_steps"):
        tighter(Budget(), 0)  # __post_init__ ran


def test_a_name_that_is_not_a_field_is_refused() -> None:
    with pytest.raises(TypeError):
        copier(ExecutionRecord, ("no_such_field",))(RECORD, 1)


def test_the_values_must_match_the_changed_fields() -> None:
    with pytest.raises(ValueError, match="zip"):
        copier(ExecutionRecord, ("note", "state"))(RECORD, "only one")
