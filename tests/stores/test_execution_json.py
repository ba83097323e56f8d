"""An execution record's stored JSON is written from a template (``codec.execution_json``):
it must be exactly the text of the general path, ``dumps_flat(execution_to_dict(record))``,
for every record, and fail the same way where that one fails."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from plait.adapters.stores.shared import codec
from plait.domain.messages import ToolStatus
from plait.domain.session import ExecutionRecord, ExecutionState
from plait.domain.tools import EffectClass

_texts = st.text()  # any character: quotes, backslashes, controls, non-ASCII, surrogates
_times = st.floats(allow_nan=False, allow_infinity=False)


@st.composite
def _records(draw: st.DrawFn) -> ExecutionRecord:
    maybe_text = st.none() | _texts
    maybe_time = st.none() | _times
    return ExecutionRecord(
        session_id=draw(_texts),
        run_id=draw(_texts),
        call_id=draw(_texts),
        tool_name=draw(_texts),
        effect=draw(st.sampled_from(EffectClass)),
        args_digest=draw(_texts),
        idempotency_key=draw(_texts),
        state=draw(st.sampled_from(ExecutionState)),
        requested_at=draw(_times),
        reviewed_at=draw(maybe_time),
        started_at=draw(maybe_time),
        settled_at=draw(maybe_time),
        result_status=draw(st.none() | st.sampled_from(ToolStatus)),
        decision=draw(maybe_text),
        decided_by=draw(maybe_text),
        decision_reason=draw(maybe_text),
        note=draw(maybe_text),
    )


def _general(record: ExecutionRecord) -> str:
    return codec.dumps_flat(codec.execution_to_dict(record))


@settings(max_examples=300)
@given(_records())
def test_the_template_writes_the_general_paths_text(record: ExecutionRecord) -> None:
    text = codec.execution_json(record)
    assert text == _general(record)
    assert codec.execution_from_dict(codec.loads(text)) == record


def _record(**changes: Any) -> ExecutionRecord:
    fields: dict[str, Any] = {
        "session_id": "ses_1",
        "run_id": "run_1",
        "call_id": "call_1",
        "tool_name": "echo",
        "effect": EffectClass.READ_ONLY,
        "args_digest": "sha256:ab",
        "idempotency_key": "idem_1",
        "state": ExecutionState.REQUESTED,
        "requested_at": 1796203433.345264,
    }
    return ExecutionRecord(**(fields | changes))


@pytest.mark.parametrize(
    "changes",
    [
        {"requested_at": 12},  # an int where a float is typed
        {"reviewed_at": True},
        {"state": "requested"},  # a plain string where an enum is typed
        {"effect": "read_only"},
        {"result_status": "succeeded"},
        {"decision": 3},
        {"note": ["a list"]},
        {"session_id": 7},
    ],
    ids=lambda c: next(iter(c)),
)
def test_values_off_the_template_take_the_general_path(changes: dict[str, Any]) -> None:
    record = _record(**changes)
    assert codec.execution_json(record) == _general(record)


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_a_time_json_cannot_hold_fails_as_the_general_path_does(value: float) -> None:
    record = _record(settled_at=value)
    with pytest.raises(ValueError, match="Out of range float values are not JSON compliant"):
        _general(record)
    with pytest.raises(ValueError, match="Out of range float values are not JSON compliant"):
        codec.execution_json(record)


def test_a_value_json_cannot_hold_fails_as_the_general_path_does() -> None:
    record = _record(note=object())
    with pytest.raises(TypeError, match="is not JSON serializable"):
        _general(record)
    with pytest.raises(TypeError, match="is not JSON serializable"):
        codec.execution_json(record)


@pytest.mark.parametrize(("first", "then"), [(0.0, -0.0), (-0.0, 0.0)])
def test_a_zero_time_is_written_with_its_own_sign(first: float, then: float) -> None:
    assert codec.execution_json(_record(requested_at=first)) == _general(
        _record(requested_at=first)
    )
    assert codec.execution_json(_record(requested_at=then)) == _general(_record(requested_at=then))


def test_times_written_again_are_the_same_text() -> None:
    """A settled record repeats its request's time and has reviewed and started at one
    moment: the text kept of a time is its own, however many times come between."""
    times = [1796203433.345264 + i / 7 for i in range(40)]
    for at in times + times[::-1]:
        record = _record(requested_at=at, reviewed_at=at, started_at=at, settled_at=at + 1)
        assert codec.execution_json(record) == _general(record)
    assert codec._TIMES and len(codec._TIMES) <= codec._TIMES_KEPT
