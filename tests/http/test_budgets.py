"""A run's budget over HTTP: ``POST /v1/sessions/{id}/messages`` takes ``plait send``'s
budget (max steps, deadline, model calls, tokens, cost, tool timeout, output cap),
validated, stored on the queued run and enforced by the worker; a cost ceiling for a
model without prices is refused with send's ``config_error`` before anything is written,
or, when the API process has no model to check it with, fails the run in the worker."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from plait.adapters.stores.sqlite.store import SqliteStore
from plait.application.ports import ModelCapabilities, ModelRequest, ModelResponse
from plait.domain.messages import Usage
from plait.domain.runs import RunStatus
from plait.runtime import Runtime
from plait.testing import FixedClock, FunctionModel, SequentialIds, echo_tool
from tests.http.conftest import Live, behaviour, serve_live
from tests.http.test_api import error, new_session, wait_terminal

PRICED = ModelCapabilities(
    structured_output=True,
    context_window=128_000,
    price_input_per_mtok=3.0,
    price_output_per_mtok=15.0,
)


async def costly(request: ModelRequest) -> ModelResponse:
    """``behaviour``, each call reporting 20,000 input and 1,000 output tokens ($0.075)."""
    answer = await behaviour(request)
    return ModelResponse(
        text=answer.text,
        tool_calls=answer.tool_calls,
        usage=Usage(input_tokens=20_000, output_tokens=1_000),
    )


@pytest.fixture
def priced(tmp_path: Path) -> Iterator[Live]:
    model = FunctionModel(costly, name="priced", capabilities=PRICED)
    yield from serve_live(tmp_path, model=model)


@pytest.fixture
def no_model(tmp_path: Path) -> Iterator[Live]:
    """An API process without a model and without a worker (as on PostgreSQL)."""
    yield from serve_live(tmp_path, model=None, serve_workers=0)


def _post(live: Live, text: str, budget: dict[str, Any]) -> tuple[str, Any]:
    with live.client() as c:
        sid = new_session(c)["session_id"]
        return sid, c.post(f"/v1/sessions/{sid}/messages", json={"text": text, "budget": budget})


@pytest.mark.slow
def test_the_budget_is_stored_on_the_queued_run_and_enforced(priced: Live) -> None:
    budget = {
        "max_steps": 5, "deadline_seconds": 120, "max_model_calls": 9,
        "max_total_tokens": 1_000_000, "max_cost_usd": 0.05, "tool_timeout_seconds": 7,
        "tool_output_cap_bytes": 4096,
    }  # fmt: skip
    _, r = _post(priced, "tool please", budget)
    assert r.status_code == 202, r.text
    stored = r.json()["budget"]
    assert {k: stored[k] for k in budget} == budget
    with priced.client() as c:
        run = wait_terminal(c, r.json()["run_id"])
    # the first call cost $0.075: the ceiling stops the run before the second one
    assert (run["status"], run["error"]["code"]) == ("budget_exhausted", "max_cost")
    assert run["usage"]["model_calls"] == 1 and run["budget"]["max_cost_usd"] == 0.05
    _, r = _post(priced, "tool again", {"max_steps": 1})
    with priced.client() as c:
        run = wait_terminal(c, r.json()["run_id"])
    assert (run["status"], run["error"]["code"]) == ("budget_exhausted", "max_steps")
    # left out: the server's defaults
    assert run["budget"]["max_cost_usd"] is None and run["budget"]["deadline_seconds"] == 600


@pytest.mark.slow
def test_a_cost_ceiling_for_a_model_without_prices_is_refused_before_anything_is_written(
    live: Live,
) -> None:
    sid, r = _post(live, "hello", {"max_cost_usd": 1})
    err = error(r, 400, "config_error")
    assert "model 'behaviour' declares none" in err["message"]
    assert "price_input_per_mtok" in err["message"]
    assert err["details"] == {"model": "behaviour", "max_cost_usd": 1}
    with live.client() as c:
        assert c.get(f"/v1/sessions/{sid}/messages").json()["messages"] == []
        assert c.get(f"/v1/sessions/{sid}/runs").json()["runs"] == []
        ok = c.post(f"/v1/sessions/{sid}/messages", json={"text": "hello"})  # not busy
        assert wait_terminal(c, ok.json()["run_id"])["status"] == "completed"


@pytest.mark.slow
@pytest.mark.parametrize(
    ("budget", "where"),
    [
        ({"max_cost_usd": 0}, "body.budget.max_cost_usd"),
        ({"max_cost_usd": -1}, "body.budget.max_cost_usd"),
        ({"max_cost_usd": "a lot"}, "body.budget.max_cost_usd"),
        ({"max_cost_usd": 10_000_000}, "body.budget.max_cost_usd"),
        ({"tool_output_cap_bytes": 10}, "body.budget.tool_output_cap_bytes"),
        ({"max_steps": 0}, "body.budget.max_steps"),
        ({"deadline_seconds": 0}, "body.budget.deadline_seconds"),
        ({"max_cost": 1}, "body.budget.max_cost"),  # the CLI's flag name is no field
    ],
)
def test_bad_budgets_are_invalid_requests_naming_the_field(
    priced: Live, budget: dict[str, Any], where: str
) -> None:
    sid, r = _post(priced, "hello", budget)
    err = error(r, 422, "invalid_request")
    assert [p["where"] for p in err["details"]["problems"]] == [where]
    with priced.client() as c:
        assert c.get(f"/v1/sessions/{sid}/runs").json()["runs"] == []


@pytest.mark.slow
def test_a_ceiling_the_api_could_not_check_fails_the_run_in_the_worker(no_model: Live) -> None:
    sid, r = _post(no_model, "hello", {"max_cost_usd": 1})
    assert r.status_code == 202 and r.json()["status"] == "queued"

    async def work() -> Any:
        store = SqliteStore.open(no_model.store_path)
        unpriced = FunctionModel(behaviour, name="unpriced")
        rt = Runtime(
            store=store, artifacts=store, model=unpriced, tools=[echo_tool().tool],
            clock=FixedClock(), ids=SequentialIds(), owner="w1",
        )  # fmt: skip
        try:
            now = rt.service.clock.now()
            claimed = await store.claim_queued_run(owner="w1", now=now, expires_at=now + 60)
            assert claimed is not None
            return await rt.service.execute(claimed)
        finally:
            await store.close()

    result = asyncio.run(work())
    assert result.run.status is RunStatus.FAILED and result.run.error is not None
    assert result.run.error.code == "config_error"
    assert "model 'unpriced' declares none" in result.run.error.message
    with no_model.client() as c:
        run = c.get(f"/v1/runs/{r.json()['run_id']}").json()
        assert (run["status"], run["error"]["code"]) == ("failed", "config_error")
        messages = c.get(f"/v1/sessions/{sid}/messages").json()["messages"]
        assert [m["kind"] for m in messages] == ["user"]  # no model call was made
        assert c.get(f"/v1/sessions/{sid}").json()["active_run_id"] is None
