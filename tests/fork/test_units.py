"""The complete-unit rule (plait.domain.units) on plain message lists."""

from __future__ import annotations

import pytest

from plait.domain.messages import (
    AssistantMessage,
    Message,
    ToolCall,
    ToolResult,
    ToolResultMessage,
    ToolStatus,
    UserMessage,
)
from plait.domain.units import CutPoints, Unit, cut_points, is_cut_point, locate_cut, units
from tests.fork.conftest import seed_messages


def u(mid: str) -> UserMessage:
    return UserMessage(id=mid, text=mid, created_at=0.0)


def a(mid: str, *calls: str) -> AssistantMessage:
    return AssistantMessage(
        id=mid,
        text="",
        created_at=0.0,
        tool_calls=tuple(ToolCall.create(id=c, name="t", arguments={}) for c in calls),
    )


def r(mid: str, call: str) -> ToolResultMessage:
    return ToolResultMessage(
        id=mid,
        tool_name="t",
        created_at=0.0,
        result=ToolResult(call_id=call, status=ToolStatus.SUCCEEDED),
    )


def test_seed_history_units_and_cut_points() -> None:
    h = seed_messages()
    assert units(h) == [Unit(0, 0, True), Unit(1, 2, True), Unit(3, 4, True), Unit(5, 5, True)]
    assert cut_points(h) == [0, 2, 4, 5]
    assert [is_cut_point(h, i) for i in range(6)] == [True, False, True, False, True, True]
    assert locate_cut(h, 1) == CutPoints(valid=False, before=0, after=2)
    assert locate_cut(h, 3) == CutPoints(valid=False, before=2, after=4)


def test_parallel_calls_need_every_result_in_any_order() -> None:
    h: list[Message] = [u("m1"), a("m2", "x", "y", "z"), r("m3", "z"), r("m4", "x"), r("m5", "y")]
    assert units(h) == [Unit(0, 0, True), Unit(1, 4, True)]
    assert [is_cut_point(h, i) for i in range(5)] == [True, False, False, False, True]
    assert locate_cut(h, 3) == CutPoints(valid=False, before=0, after=4)


def test_an_unfinished_last_unit_has_no_point_after() -> None:
    h: list[Message] = [u("m1"), a("m2", "x", "y"), r("m3", "x")]
    assert units(h) == [Unit(0, 0, True), Unit(1, 2, False)]
    assert locate_cut(h, 2) == CutPoints(valid=False, before=0, after=None)
    assert locate_cut(h, 0) == CutPoints(valid=True)


def test_orphaned_or_repeated_results_are_never_cut_points() -> None:
    h: list[Message] = [r("m0", "ghost"), u("m1"), a("m2", "x"), r("m3", "x"), r("m4", "x")]
    assert units(h) == [Unit(0, 0, False), Unit(1, 1, True), Unit(2, 3, True), Unit(4, 4, False)]
    assert cut_points(h) == [1, 3]
    assert locate_cut(h, 0) == CutPoints(valid=False, before=None, after=1)
    assert locate_cut(h, 4) == CutPoints(valid=False, before=3, after=None)


def test_windows_answer_none_until_they_can_decide() -> None:
    h: list[Message] = [u("m1"), a("m2", "x"), r("m3", "x"), a("m4", "y"), r("m5", "y"), u("m6")]
    # Only tool results at and before the index: no unit start in the window.
    assert locate_cut(h[2:3], 0, from_start=False, to_end=False) is None
    # Valid is decided from the unit alone, whatever lies outside.
    assert locate_cut(h[1:3], 1, from_start=False, to_end=False) == CutPoints(valid=True)
    # Invalid, but no complete unit before it inside the window: need more before.
    assert locate_cut(h[3:5], 0, from_start=False, to_end=False) is None
    # ... and none after it: need more after.
    assert locate_cut(h[1:4], 2, from_start=False, to_end=False) is None
    assert locate_cut(h[0:4], 3, from_start=True, to_end=False) is None
    assert locate_cut(h[0:5], 3, from_start=True, to_end=False) == CutPoints(False, 2, 4)


def test_index_outside_the_list_is_a_programming_error() -> None:
    with pytest.raises(IndexError):
        locate_cut([u("m1")], 1)
