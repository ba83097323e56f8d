"""Copies of frozen records by their slots (plait.domain._copy). That a record's review and
settlement and a run's step give what ``dataclasses.replace`` gives is checked field by
field in test_record_steps; here: what a copy is, and ``replace`` itself where
``__init__`` does more than set fields."""

from __future__ import annotations

import copy
import dataclasses
import pickle

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
    with pytest.raises(TypeError, match="missing 1 required positional argument"):
        copier(ExecutionRecord, ("note", "state"))(RECORD, "only one")
    with pytest.raises(TypeError, match="takes 3 positional arguments but 4 were given"):
        copier(ExecutionRecord, ("note", "state"))(RECORD, "one", ExecutionState.SETTLED, "x")


def test_a_copy_is_made_as_its_twin_then_is_the_record_s_own_class() -> None:
    """The copy is built in a plain class of the same layout and then given the record's
    class: it is an instance of the record's class alone, frozen, equal and hashed as
    ``replace``'s copy, and pickles as one."""
    settle = copier(ExecutionRecord, ("state", "settled_at", "result_status"))
    settled = settle(RECORD, ExecutionState.SETTLED, 7.5, ToolStatus.SUCCEEDED)
    expected = dataclasses.replace(
        RECORD, state=ExecutionState.SETTLED, settled_at=7.5, result_status=ToolStatus.SUCCEEDED
    )
    assert type(settled) is ExecutionRecord
    assert settled == expected and hash(settled) == hash(expected)
    assert [getattr(settled, f.name) for f in dataclasses.fields(ExecutionRecord)] == [
        getattr(expected, f.name) for f in dataclasses.fields(ExecutionRecord)
    ]
    assert pickle.loads(pickle.dumps(settled)) == expected
    assert copy.copy(settled) == expected
    with pytest.raises(dataclasses.FrozenInstanceError):
        settled.state = ExecutionState.REQUESTED  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        del settled.note
    assert "Twin" not in repr(settled)
    assert settle.__qualname__.startswith("copier(ExecutionRecord")


def test_a_class_with_a_base_of_its_own_is_copied_by_replace() -> None:
    """A twin cannot share the layout of a class whose slots are spread over a base."""

    @dataclasses.dataclass(frozen=True, slots=True)
    class Base:
        a: int

    @dataclasses.dataclass(frozen=True, slots=True)
    class Derived(Base):
        b: int

    made = copier(Derived, ("b",))(Derived(1, 2), 3)
    assert type(made) is Derived and made == Derived(1, 3)
    plain = copier(Base, ("a",))(Base(1), 2)
    assert type(plain) is Base and plain == Base(2)
