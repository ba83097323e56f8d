"""A model server that accepts the connection and then goes silent: each attempt ends
after ``idle_timeout_seconds`` without a byte with a ``model_timeout`` error, retried as
transient; a slow stream that keeps sending is never cut."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import pytest

from plait.adapters.models import open_model
from plait.application._run_state import model_failure
from plait.application.model_caller import ModelCaller, RetryPolicy
from plait.application.ports import ModelRole
from plait.config import Config, ModelEntry
from plait.domain.errors import ConfigError, ModelError, ModelErrorCode, ModelTimeoutError
from plait.domain.runs import RunStatus
from plait.testing.fake_providers import DIALECTS, FakeProvider, FakeTurn, Reply
from tests.adapters._clients import SPECS, ask, client_for

IDLE = 0.6  # room for the fake server to record a request on a busy machine first
TURN = FakeTurn(text="One two three four five six.")
SILENT = Reply(stall=True)


@pytest.mark.slow
@pytest.mark.parametrize("dialect", list(SPECS))
@pytest.mark.parametrize("streamed", [False, True], ids=["plain", "streamed"])
def test_a_silent_server_ends_the_attempt_with_model_timeout(dialect: str, streamed: bool) -> None:
    with FakeProvider(dialect, [TURN]) as fake:
        fake.fail_first(SILENT)
        model = client_for(dialect, fake.base_url, idle_timeout_seconds=IDLE)
        request = replace(ask(), on_text=lambda _: None) if streamed else ask()
        with pytest.raises(ModelTimeoutError) as info:
            asyncio.run(model.complete(request))
    error = info.value
    assert error.code == "model_timeout"
    assert error.model_code == ModelErrorCode.TRANSIENT
    assert error.details["idle_timeout_seconds"] == IDLE
    assert f"sent nothing for {IDLE:g} s" in error.message
    assert len(fake.requests) == 1


@pytest.mark.slow
@pytest.mark.parametrize("dialect", list(SPECS))
def test_a_stream_that_stalls_after_its_headers_times_out(dialect: str) -> None:
    events = tuple(DIALECTS[dialect].events(TURN, "fake-model"))
    with FakeProvider(dialect, [TURN]) as fake:
        fake.fail_first(Reply(events=events, stall=True, stall_after=2))
        model = client_for(dialect, fake.base_url, idle_timeout_seconds=IDLE)
        with pytest.raises(ModelTimeoutError):
            asyncio.run(model.complete(replace(ask(), on_text=lambda _: None)))


@pytest.mark.slow
def test_a_slow_stream_that_keeps_sending_is_not_cut() -> None:
    """Each event arrives within the idle timeout, the whole answer takes longer."""
    events = tuple(DIALECTS["openai"].events(TURN, "fake-model"))
    idle = 1.0
    with FakeProvider("openai", [TURN]) as fake:
        fake.fail_first(Reply(events=events, pause=idle / 4))
        model = client_for("openai", fake.base_url, idle_timeout_seconds=idle)
        shown: list[str] = []
        response = asyncio.run(model.complete(replace(ask(), on_text=shown.append)))
    assert len(events) * idle / 4 > idle  # the whole stream outlasts the idle timeout
    assert response.text == "".join(shown) == TURN.text


class _Budget:
    def __init__(self) -> None:
        self.spent = 0

    def spend(self, role: ModelRole, attempt: int) -> None:
        self.spent += 1

    def settled(self, role: ModelRole, attempt: int, model: str, outcome: object) -> None:
        pass

    @property
    def deadline(self) -> float | None:
        return None


class _Clock:
    def now(self) -> float:
        return 0.0

    def monotonic(self) -> float:
        return 0.0


async def _no_wait(seconds: float) -> None:
    return None


@pytest.mark.slow
def test_the_model_caller_retries_a_timed_out_attempt() -> None:
    with FakeProvider("anthropic", [TURN]) as fake:
        fake.fail_first(SILENT)
        model = client_for("anthropic", fake.base_url, idle_timeout_seconds=1.0)
        caller = ModelCaller(model, clock=_Clock(), sleep=_no_wait)
        budget = _Budget()
        response = asyncio.run(caller.call("assistant", ask().context, budget))
    assert response.text == TURN.text
    assert budget.spent == 2 and len(fake.requests) == 2


@pytest.mark.slow
def test_a_run_whose_every_attempt_timed_out_fails_with_model_timeout() -> None:
    with FakeProvider("openai", []) as fake:
        fake.fail_first(SILENT, SILENT)
        model = client_for("openai", fake.base_url, idle_timeout_seconds=IDLE)
        caller = ModelCaller(
            model,
            clock=_Clock(),
            sleep=_no_wait,
            policy=RetryPolicy(max_attempts=2),
        )
        with pytest.raises(ModelError) as info:
            asyncio.run(caller.call("assistant", ask().context, _Budget()))
    stop = model_failure(info.value, "assistant", None)
    assert stop.status is RunStatus.FAILED and stop.error.code == "model_timeout"
    assert len(fake.requests) == 2


@pytest.mark.parametrize("seconds", [0, -5.0])
def test_the_idle_timeout_must_be_positive(seconds: float) -> None:
    spec = "openai-compatible:http://127.0.0.1:9/v1#m"
    entry = ModelEntry(name=spec, source="t", settings={"idle_timeout_seconds": seconds})
    with pytest.raises(ConfigError) as info:
        open_model(spec, config=Config(models={spec: entry}), env={})
    assert info.value.details["setting"] == "idle_timeout_seconds"
    assert "idle_timeout_seconds" in info.value.message
