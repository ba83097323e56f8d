"""Typed final answers through the loop: native mode, the validated fallback,
corrections within the budget, the Python API's model instance, and recovery."""

from __future__ import annotations

import json
from typing import Any

import pydantic
import pytest

from plait.adapters.stores.memory.store import MemoryStore
from plait.application.ports import ModelCapabilities
from plait.domain.answers import OutputSchema
from plait.domain.errors import ValidationError
from plait.domain.messages import AssistantMessage
from plait.domain.runs import Budget, RunStatus
from plait.testing import FixedClock, FunctionModel, SequentialIds, echo_tool
from tests.application.conftest import call, make_rig, reply, run
from tests.application.test_recovery import Died, die_at

VERDICT = {
    "type": "object",
    "properties": {
        "verdict": {"type": "string", "enum": ["pass", "fail"]},
        "score": {"type": "integer", "minimum": 0},
    },
    "required": ["verdict", "score"],
    "additionalProperties": False,
}


class Verdict(pydantic.BaseModel):
    verdict: str
    score: int


def _final(rig: Any, session_id: str) -> AssistantMessage:
    last = rig.history(session_id)[-1].message
    assert isinstance(last, AssistantMessage)
    return last


def test_native_mode_puts_the_schema_in_the_context_and_stores_the_value() -> None:
    rig = make_rig(
        [
            reply("", call("echo", {"text": "x"}, "c1")),
            reply('{"verdict": "pass", "score": 3}'),
        ],
        [echo_tool()],
    )
    s = run(rig.service.create_session())
    result = run(rig.service.send(s.id, "judge", output_type=VERDICT))
    assert result.run.status is RunStatus.COMPLETED
    assert result.output == {"verdict": "pass", "score": 3}
    assert _final(rig, s.id).output == {"verdict": "pass", "score": 3}
    for request in rig.turns.requests:
        assert request.context.output_schema == OutputSchema.create(VERDICT)
        assert "JSON Schema" not in request.context.instructions  # native: no fallback text
    stored = run(rig.store.get_run(result.run.id))
    assert stored.output_schema == OutputSchema.create(VERDICT)


def test_fallback_asks_in_the_instructions_and_parses_a_fenced_answer() -> None:
    rig = make_rig([reply('```json\n{"verdict": "fail", "score": 0}\n```')])
    plain = FunctionModel(rig.turns, name="plain", capabilities=ModelCapabilities())
    rig.service.caller = rig.service.caller.with_model(plain)
    rig.service.driver.caller = rig.service.caller
    s = run(rig.service.create_session())
    result = run(rig.service.send(s.id, "judge", output_type=VERDICT))
    assert result.run.status is RunStatus.COMPLETED, result.run.error
    assert result.output == {"verdict": "fail", "score": 0}
    (request,) = rig.turns.requests
    assert request.context.output_schema is None
    assert OutputSchema.create(VERDICT).schema_json in request.context.instructions


def test_an_invalid_answer_is_corrected_within_the_budget() -> None:
    rig = make_rig(
        [
            reply("It passes."),
            reply('{"verdict": "maybe", "score": 1}'),
            reply('{"verdict": "pass", "score": 1}'),
        ],
        budget=Budget(max_corrections=2),
    )
    s = run(rig.service.create_session())
    result = run(rig.service.send(s.id, "judge", output_type=VERDICT))
    assert result.run.status is RunStatus.COMPLETED
    assert result.output == {"verdict": "pass", "score": 1}
    assert result.run.usage.model_calls == 3 and result.run.usage.corrections == 2
    first, second = (r.context.corrections for r in rig.turns.requests[1:])
    assert "not valid JSON" in first[-1].problems[0]
    assert "does not match the output schema" in second[-1].problems[0]
    assert "maybe" in second[-1].problems[0]
    # only the valid answer is history
    assert [m.message.kind for m in rig.history(s.id)] == ["user", "assistant"]


def test_an_answer_still_invalid_when_the_corrections_end_fails_the_run() -> None:
    rig = make_rig([reply('{"verdict": "pass"}')] * 2, budget=Budget(max_corrections=1))
    s = run(rig.service.create_session())
    result = run(rig.service.send(s.id, "judge", output_type=VERDICT))
    assert result.run.status is RunStatus.FAILED
    assert result.run.error is not None and result.run.error.code == "invalid_model_output"
    assert "does not match the output schema" in result.run.error.message
    assert "score" in result.run.error.message
    assert result.output is None
    assert [m.message.kind for m in rig.history(s.id)] == ["user"]
    assert run(rig.store.get_session(s.id)).active_run_id is None


def test_the_model_budget_bounds_the_corrections_too() -> None:
    rig = make_rig([reply("no json")] * 5, budget=Budget(max_corrections=4, max_model_calls=2))
    s = run(rig.service.create_session())
    result = run(rig.service.send(s.id, "judge", output_type=VERDICT))
    assert result.run.status is RunStatus.BUDGET_EXHAUSTED
    assert result.run.usage.model_calls == 2


def test_the_python_api_returns_the_model_instance() -> None:
    rig = make_rig([reply('{"verdict": "pass", "score": 7}')])
    s = run(rig.service.create_session())
    result = run(rig.service.send(s.id, "judge", output_type=Verdict))
    assert result.output == Verdict(verdict="pass", score=7)
    sent = rig.turns.requests[0].context.output_schema
    assert sent is not None and sent.name == "Verdict"
    assert sent.schema() == Verdict.model_json_schema()


def test_a_schema_that_is_not_json_schema_is_refused_before_anything_is_written() -> None:
    rig = make_rig([])
    s = run(rig.service.create_session())
    with pytest.raises(ValidationError, match="invalid output schema at #/type"):
        run(rig.service.send(s.id, "judge", output_type={"type": "frobnicate"}))
    assert rig.history(s.id) == []


def test_recovery_keeps_the_schema() -> None:
    """A run whose process died after its tool result is recovered by another owner:
    its final answer is still asked for in the schema and validated."""
    store, clock = MemoryStore(), FixedClock()
    first = make_rig(
        [reply("", call("echo", {"text": "x"}, "c1"))],
        [echo_tool()],
        store=store,
        clock=clock,
        checkpoint=die_at("result_saved"),
    )
    s = run(first.service.create_session())
    with pytest.raises(Died):
        run(first.service.send(s.id, "judge", output_type=VERDICT))
    clock.advance(61)
    second = make_rig(
        [reply("done"), reply(json.dumps({"verdict": "pass", "score": 2}))],
        [echo_tool()],
        store=store,
        clock=clock,
        ids=SequentialIds(start=1000),
    )
    second.service.owner = "worker-2"
    (report,) = run(second.service.recover())
    assert report.result is not None and report.result.run.status is RunStatus.COMPLETED
    assert second.turns.requests[0].context.output_schema == OutputSchema.create(VERDICT)
    assert "not valid JSON" in second.turns.requests[1].context.corrections[0].problems[0]
    assert _final(second, s.id).output == {"verdict": "pass", "score": 2}
