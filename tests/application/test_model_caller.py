"""ModelCaller: the error-code policy of DESIGN §6, with a fake clock and sleep."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from plait.application.model_caller import ModelCaller, RetryPolicy
from plait.application.ports import ModelRequest, ModelResponse, ModelRole
from plait.domain.context import Context, Prefix
from plait.domain.errors import BudgetExhaustedError, ModelError
from plait.domain.messages import AssistantMessage
from plait.domain.runs import Budget, RunStatus
from plait.testing import FixedClock, FunctionModel

from .conftest import Turns, make_rig, reply, run


@dataclass
class FakeSleep:
    clock: FixedClock
    waits: list[float] = field(default_factory=list)

    async def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)
        self.clock.advance(seconds)


@dataclass
class Attempts:
    limit: int | None = None
    deadline: float | None = None
    spent: list[tuple[str, int]] = field(default_factory=list)

    def spend(self, role: ModelRole, attempt: int) -> None:
        if self.limit is not None and len(self.spent) >= self.limit:
            raise BudgetExhaustedError("no model calls left", limit="max_model_calls")
        self.spent.append((role, attempt))

    def settled(self, role: ModelRole, attempt: int, model: str, outcome: object) -> None:
        pass


def context() -> Context[Any]:
    return Context(instructions="i", tools=(), items=Prefix([]), output_type=AssistantMessage)


def err(code: str, **details: Any) -> ModelError:
    return ModelError(f"provider says {code}", model_code=code, **details)


def caller(
    items: list[Any], clock: FixedClock, **kwargs: Any
) -> tuple[ModelCaller, Turns, FakeSleep]:
    turns = Turns(items)
    sleep = FakeSleep(clock)
    mc = ModelCaller(
        FunctionModel(turns, name="fn"), clock=clock, sleep=sleep, jitter=lambda: 1.0, **kwargs
    )
    return mc, turns, sleep


def test_rate_limited_with_retry_after_waits_that_long() -> None:
    clock = FixedClock()
    mc, _turns, sleep = caller([err("RATE_LIMITED", retry_after=2.0), reply("ok")], clock)
    attempts = Attempts()
    response = run(mc.call("assistant", context(), attempts))
    assert response.text == "ok"
    assert sleep.waits == [2.0]
    assert attempts.spent == [("assistant", 1), ("assistant", 2)]


def test_transient_backs_off_exponentially_with_jitter() -> None:
    clock = FixedClock()
    items: list[Any] = [err("TRANSIENT"), err("TRANSIENT"), err("TRANSIENT"), reply("ok")]
    mc, _, sleep = caller(items, clock, policy=RetryPolicy(base_delay=1.0, max_delay=3.0))
    run(mc.call("reviewer", context(), Attempts()))
    assert sleep.waits == [1.0, 2.0, 3.0]  # capped at max_delay; jitter 1.0 = full delay


def test_jitter_scales_the_wait() -> None:
    clock = FixedClock()
    turns = Turns([err("TRANSIENT"), reply("ok")])
    sleep = FakeSleep(clock)
    mc = ModelCaller(FunctionModel(turns), clock=clock, sleep=sleep, jitter=lambda: 0.25)
    run(mc.call("assistant", context(), Attempts()))
    assert sleep.waits == [0.25]


def test_every_attempt_is_budgeted() -> None:
    clock = FixedClock()
    mc, turns, _sleep = caller([err("TRANSIENT"), err("TRANSIENT"), reply("ok")], clock)
    attempts = Attempts(limit=2)
    with pytest.raises(BudgetExhaustedError) as info:
        run(mc.call("assistant", context(), attempts))
    assert info.value.details["limit"] == "max_model_calls"
    assert len(turns.requests) == 2 and len(attempts.spent) == 2


def test_retries_end_after_max_attempts() -> None:
    clock = FixedClock()
    mc, turns, _ = caller([err("TRANSIENT")] * 3, clock, policy=RetryPolicy(max_attempts=3))
    with pytest.raises(ModelError, match="provider says TRANSIENT"):
        run(mc.call("assistant", context(), Attempts()))
    assert len(turns.requests) == 3


@pytest.mark.parametrize("code", ["AUTHENTICATION", "INVALID_REQUEST"])
def test_non_retryable_codes_are_not_retried(code: str) -> None:
    clock = FixedClock()
    mc, turns, sleep = caller([err(code), reply("never")], clock)
    with pytest.raises(ModelError) as info:
        run(mc.call("assistant", context(), Attempts()))
    assert info.value.model_code == code
    assert len(turns.requests) == 1 and sleep.waits == []


def test_a_wait_past_the_deadline_ends_with_budget_exhausted() -> None:
    clock = FixedClock()
    mc, turns, sleep = caller([err("RATE_LIMITED", retry_after=30.0), reply("x")], clock)
    attempts = Attempts(deadline=clock.monotonic() + 10)
    with pytest.raises(BudgetExhaustedError) as info:
        run(mc.call("assistant", context(), attempts))
    assert info.value.details["limit"] == "deadline"
    assert sleep.waits == [] and len(turns.requests) == 1


def test_context_overflow_goes_to_the_hook_once() -> None:
    clock = FixedClock()
    seen: list[tuple[str, str]] = []
    smaller = Context(
        instructions="small", tools=(), items=Prefix([]), output_type=AssistantMessage
    )

    async def hook(role: ModelRole, ctx: Context[Any], e: ModelError) -> Context[Any] | None:
        seen.append((role, e.model_code))
        return smaller

    items: list[Any] = [err("CONTEXT_WINDOW_EXCEEDED"), reply("fits")]
    mc, turns, _ = caller(items, clock, on_overflow=hook)
    assert run(mc.call("summarizer", context(), Attempts())).text == "fits"
    assert seen == [("summarizer", "CONTEXT_WINDOW_EXCEEDED")]
    assert turns.requests[1].context.instructions == "small"
    # a second overflow after shrinking once is not handed over again
    mc2, _, _ = caller([err("CONTEXT_WINDOW_EXCEEDED")] * 2, clock, on_overflow=hook)
    with pytest.raises(ModelError):
        run(mc2.call("assistant", context(), Attempts()))


def test_streaming_sink_and_role_reach_the_model() -> None:
    clock = FixedClock()
    got: list[str] = []

    def answer(request: ModelRequest) -> ModelResponse:
        assert request.on_text is not None
        request.on_text("he")
        request.on_text("llo")
        return reply(request.role)

    mc = ModelCaller(FunctionModel(answer), clock=clock)
    response = run(mc.call("reviewer", context(), Attempts(), on_text=got.append))
    assert response.text == "reviewer" and got == ["he", "llo"]


def test_service_retries_and_counts_attempts_in_the_run() -> None:
    rig = make_rig([err("RATE_LIMITED", retry_after=0.0), reply("done")])
    s = run(rig.service.create_session())
    result = run(rig.service.send(s.id, "go"))
    assert result.run.status is RunStatus.COMPLETED
    assert result.run.usage.model_calls == 2


def test_service_retry_stops_at_the_model_call_budget() -> None:
    items: list[Any] = [err("TRANSIENT", retry_after=0.0)] * 3
    rig = make_rig(items, budget=Budget(max_model_calls=2))
    s = run(rig.service.create_session())
    result = run(rig.service.send(s.id, "go"))
    assert result.run.status is RunStatus.BUDGET_EXHAUSTED
    assert result.run.error is not None and result.run.error.code == "max_model_calls"
    assert len(rig.turns.requests) == 2


def test_service_keeps_the_provider_message_of_a_fatal_error() -> None:
    rig = make_rig([err("AUTHENTICATION", status=401)])
    s = run(rig.service.create_session())
    result = run(rig.service.send(s.id, "go"))
    assert result.run.status is RunStatus.FAILED
    assert result.run.error is not None
    assert result.run.error.code == "authentication"
    assert "provider says AUTHENTICATION" in result.run.error.message
