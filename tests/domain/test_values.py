"""Domain rules: validation at construction, immutability, the error hierarchy."""

from __future__ import annotations

import dataclasses
import pickle

import pytest

from plait.domain.context import Prefix
from plait.domain.errors import (
    ConflictError,
    LeaseLostError,
    ModelError,
    ModelErrorCode,
    PlaitError,
    SessionBusyError,
    SessionNotFoundError,
    ToolError,
    ValidationError,
)
from plait.domain.messages import (
    AssistantMessage,
    ToolCall,
    ToolResult,
    ToolStatus,
    UserMessage,
    argument_digest,
)
from plait.domain.runs import Budget, Run, RunStatus
from plait.domain.tools import EffectClass, ToolSpec


def test_messages_are_immutable() -> None:
    m = UserMessage(id="m1", text="hi", created_at=1.0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        m.text = "changed"  # type: ignore[misc]


@pytest.mark.parametrize("bad_id", ["", None, 5])
def test_message_ids_must_be_non_empty_strings(bad_id: object) -> None:
    with pytest.raises(ValidationError, match="message id"):
        UserMessage(id=bad_id, text="x", created_at=1.0)  # type: ignore[arg-type]


def test_assistant_message_rejects_repeated_call_ids() -> None:
    c = ToolCall.create(id="c1", name="echo", arguments={"text": "a"})
    with pytest.raises(ValidationError, match="repeats a tool call id"):
        AssistantMessage(id="m1", text="", created_at=1.0, tool_calls=(c, c))


def test_tool_call_arguments_are_decoded_once_and_shared() -> None:
    c = ToolCall.create(id="c1", name="echo", arguments={"text": "a", "n": [1]})
    assert c.arguments() == {"text": "a", "n": [1]}
    assert c.arguments() is c.arguments()  # decoded on first use, then kept
    decoded = {"n": [1], "text": "a"}
    checked = ToolCall.checked(
        id="c1", name="echo", arguments_json='{"n":[1],"text":"a"}', arguments=decoded
    )
    assert checked.arguments() is decoded  # what validation decoded, not decoded again
    assert checked == ToolCall(id="c1", name="echo", arguments_json='{"n":[1],"text":"a"}')
    assert checked.argument_digest() == c.argument_digest()  # key order does not matter
    assert c.argument_digest() == argument_digest(c.arguments_json)
    with pytest.raises(ValidationError, match="JSON object"):
        ToolCall(id="c1", name="echo", arguments_json="[1]")


def test_argument_digest_ignores_key_order() -> None:
    assert argument_digest('{"a":1,"b":2}') == argument_digest('{"b": 2, "a": 1}')
    assert argument_digest('{"a":1}') != argument_digest('{"a":2}')


def test_a_denial_must_carry_a_reason() -> None:
    with pytest.raises(ValidationError, match="reason"):
        ToolResult(call_id="c1", status=ToolStatus.DENIED)
    assert ToolResult(call_id="c1", status=ToolStatus.DENIED, reason="policy").reason


@pytest.mark.parametrize(
    "kwargs",
    [
        {"max_steps": 0},
        {"max_steps": 1.5},
        {"deadline_seconds": -1},
        {"max_model_calls": 0},
        {"max_corrections": -1},
        {"tool_timeout_seconds": 0},
        {"tool_output_cap_bytes": 10},
    ],
)
def test_budget_rejects_nonsense(kwargs: dict[str, object]) -> None:
    with pytest.raises(ValidationError, match="budget"):
        Budget(**kwargs)  # type: ignore[arg-type]


def test_run_status_terminality() -> None:
    assert {s for s in RunStatus if s.terminal} == {
        RunStatus.COMPLETED,
        RunStatus.BUDGET_EXHAUSTED,
        RunStatus.FAILED,
        RunStatus.CANCELLED,
    }
    run = Run(id="r", session_id="s", status=RunStatus.RUNNING, budget=Budget(), started_at=1.0)
    ended = run.ended(RunStatus.COMPLETED, 2.0)
    assert ended.ended_at == 2.0 and ended.lease is None and run.status is RunStatus.RUNNING


def test_tool_spec_checks_names_and_the_schema_root() -> None:
    with pytest.raises(ValidationError, match="must match"):
        ToolSpec(name="bad name", description="", parameters={"type": "object"})
    with pytest.raises(ValidationError, match="describe an object"):
        ToolSpec(name="t", description="", parameters={"type": "string"})


def test_tool_specs_default_to_side_effect() -> None:
    assert ToolSpec(name="t", description="", parameters={}).effect is EffectClass.SIDE_EFFECT


def test_prefix_is_a_stable_view_of_an_append_only_list() -> None:
    items = [1, 2, 3]
    view = Prefix(items)
    items.append(4)
    assert list(view) == [1, 2, 3]
    assert len(view) == 3 and view[-1] == 3 and view[0:2] == [1, 2]
    assert list(reversed(view)) == [3, 2, 1]
    with pytest.raises(IndexError):
        view[3]


@pytest.mark.parametrize(
    "error",
    [
        SessionNotFoundError("no session s1", session_id="s1"),
        SessionBusyError("busy", session_id="s1", active_run_id="r1"),
        LeaseLostError("lost", owner="w2"),
        ModelError("too long", model_code=ModelErrorCode.CONTEXT_WINDOW_EXCEEDED, status=400),
        ToolError("no such file"),
    ],
)
def test_errors_pickle_with_their_details(error: PlaitError) -> None:
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is type(error)
    assert copy.message == error.message and copy.details == error.details
    assert copy.to_dict() == error.to_dict()


def test_error_hierarchy_says_who_must_act() -> None:
    assert issubclass(SessionBusyError, ConflictError)
    assert ModelError("x", model_code="RATE_LIMITED").model_code == "RATE_LIMITED"
    assert SessionNotFoundError("x").code == "session_not_found"
