"""The runs row's ``data`` column (SQLite and PostgreSQL): every field of the run but those
kept in columns, whatever the order runs are written in (its fixed part is reused while a
run's fixed fields are the same objects)."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from plait.adapters.stores.shared import codec, rows
from plait.adapters.stores.shared.rows import RUN_COLUMNS, run_data, run_from_row
from plait.domain.answers import OutputSchema
from plait.domain.runs import Budget, Lease, Run, RunError, RunStatus, RunUsage
from plait.domain.subagents import ParentCall
from tests.contract.builders import new_run


def expected(run: Run) -> dict[str, Any]:
    return {k: v for k, v in codec.run_to_dict(run).items() if k not in RUN_COLUMNS}


def row_of(run: Run) -> tuple[Any, ...]:
    lease = run.lease
    return (
        run.id,
        run.session_id,
        run.status.value,
        run.started_at,
        None if lease is None else lease.owner,
        None if lease is None else lease.expires_at,
        run.cancel_requested,
        run_data(run),
        run.lease_token,
    )


def runs() -> list[Run]:
    plain = new_run()
    rich = new_run(
        "r2",
        budget=Budget(max_steps=7, max_cost_usd=1.5),
        model="m",
        model_spec="openai:gpt-x",
        deadline_at=1_500.0,
        policy="rules: []",
        mcp_servers=("fs", "web"),
        trace_context="00-abc-def-01",
        output_schema=OutputSchema.create({"type": "object"}, name="answer"),
        parent=ParentCall(session_id="s0", run_id="r0", call_id="c0", agent="helper"),
        lease=Lease(owner="w", expires_at=2_000.0),
    )
    return [
        plain,
        replace(plain, usage=RunUsage(steps=1, model_calls=2, input_tokens=9)),
        rich,
        replace(rich, usage=RunUsage(steps=3, tool_calls=2, output_tokens=4)),
        rich.ended(RunStatus.FAILED, 1_600.0, RunError(code="boom", message="it failed ✓")),
        plain,  # the fixed part of another run again
        replace(plain, budget=Budget(max_steps=1)),  # a new budget object, same run
    ]


def test_data_holds_every_field_but_the_columns_in_any_order() -> None:
    for run in runs():
        assert json.loads(run_data(run)) == expected(run)
        assert run_from_row(row_of(run)) == run


def test_data_covers_every_field_of_the_codec() -> None:
    """A field added to ``codec.run_to_dict`` must reach ``run_data`` (update its fixed or
    changing part when this fails)."""
    run = runs()[2]
    assert set(json.loads(run_data(run))) == set(codec.run_to_dict(run)) - set(RUN_COLUMNS)


_counts = st.integers() | st.booleans()  # a bool is an int JSON writes otherwise


@st.composite
def _changed_runs(draw: st.DrawFn) -> Run:
    usage = RunUsage(
        steps=draw(_counts),
        model_calls=draw(_counts),
        corrections=draw(_counts),
        tool_calls=draw(_counts),
        input_tokens=draw(_counts),
        output_tokens=draw(_counts),
    )
    error = draw(st.none() | st.builds(RunError, code=st.text(), message=st.text()))
    return replace(
        new_run(),
        usage=usage,
        ended_at=draw(st.none() | st.floats(allow_nan=False, allow_infinity=False)),
        error=error,
        trace_context=draw(st.none() | st.text()),
    )


@settings(max_examples=300)
@given(_changed_runs())
def test_the_changing_part_is_the_general_paths_text(run: Run) -> None:
    """Every step writes the counts and the end from a template: the same text as the
    general encoder, for any values."""
    assert rows._changing(run) == rows._changing_general(run)
    assert run_from_row(row_of(run)) == run


@pytest.mark.parametrize("ended_at", [math.nan, math.inf, 12])
def test_an_end_off_the_template_takes_the_general_path(ended_at: float) -> None:
    run = replace(new_run(), ended_at=ended_at)
    if math.isfinite(ended_at):
        assert rows._changing(run) == rows._changing_general(run)
        return
    with pytest.raises(ValueError, match="Out of range float values are not JSON compliant"):
        rows._changing_general(run)
    with pytest.raises(ValueError, match="Out of range float values are not JSON compliant"):
        run_data(run)
