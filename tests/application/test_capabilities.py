"""Capabilities a run needs are checked when it starts (article §六): tool calling,
structured output for the reviewer and the summarizer, prices for a cost ceiling, and a
reviewer setting its model cannot honour — a ConfigError before anything is written."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from plait.adapters.stores.memory.store import MemoryStore
from plait.application.capabilities import RunModelsNeeded, check_run_capabilities
from plait.application.compaction import CompactionService, ModelProfiles
from plait.application.governance.gate import GovernedGate
from plait.application.governance.governor import Governor
from plait.application.governance.reviewer import Reviewer
from plait.application.ports import ModelCapabilities, ModelClient
from plait.application.service import AgentService
from plait.domain.compaction import CompactionSettings
from plait.domain.errors import ConfigError, TokenMeterModelUnconfiguredError
from plait.domain.policy import Action, Policy, ReviewerConfig, ToolRule
from plait.domain.runs import Budget, RunStatus
from plait.domain.session import Session
from plait.testing import FixedClock, FunctionModel, RecordingTool, SequentialIds
from plait.testing.char_meter import CharMeter
from tests.governance.test_runs import EDIT

REVIEW = Policy(rules=(ToolRule(name="review-edits", action=Action.REVIEW, tools=("edit_file",)),))
PRICED = {"price_input_per_mtok": 1.0, "price_output_per_mtok": 2.0}


def model(name: str, **caps: Any) -> FunctionModel:
    async def answer(request: Any) -> Any:
        raise AssertionError("no model call expected before the check")

    fields: dict[str, Any] = {"structured_output": True} | caps
    return FunctionModel(answer, name=name, capabilities=ModelCapabilities(**fields))


def service(
    assistant: ModelClient,
    *,
    policy: Policy | None = None,
    reviewer: ModelClient | None = None,
    summarizer: ModelClient | None = None,
    compaction: CompactionSettings | None = None,
    tools: bool = True,
    store: MemoryStore | None = None,
) -> AgentService:
    fresh = store is None
    store, clock, ids = store or MemoryStore(), FixedClock(), SequentialIds()
    gate = None
    if policy is not None:
        governor = Governor(
            policy=policy, approvals=store, clock=clock, ids=ids,
            reviewer=Reviewer(config=policy.reviewer, model=reviewer),
        )  # fmt: skip
        gate = GovernedGate(governor)
    service_compaction = None
    if compaction is not None:
        clients = [c for c in (assistant, summarizer) if c is not None]
        service_compaction = CompactionService(
            store=store, profiles=ModelProfiles.of_clients(clients, lambda c: CharMeter()),
            summarizer=summarizer or assistant, clock=clock, ids=ids, settings=compaction,
        )  # fmt: skip
    svc = AgentService.build(
        store=store, artifacts=store, model=assistant,
        tools=[RecordingTool(EDIT).tool] if tools else [], clock=clock, ids=ids, owner="t",
        gate=gate, compaction=service_compaction,
    )  # fmt: skip
    if fresh:
        asyncio.run(store.create_session(Session(id="s1", created_at=1.0)))
    return svc


def refused(svc: AgentService, budget: Budget | None = None) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        asyncio.run(svc.send("s1", "go", budget=budget))
    assert asyncio.run(svc.store.list_runs()) == []  # nothing written
    assert asyncio.run(svc.store.read_messages("s1")) == []
    return info.value


def test_tools_need_tool_calling() -> None:
    error = refused(service(model("m", tool_calls=False)))
    assert "cannot call tools, but this agent has 1 tools" in error.message
    assert error.details["capability"] == "tool_calls"


def test_a_reviewer_without_structured_output_is_refused_at_start() -> None:
    plain = model("local", structured_output=False)
    error = refused(service(plain, policy=REVIEW))
    assert error.details == {
        "model": "local",
        "role": "reviewer",
        "capability": "structured output",
    }
    assert "[reviewer] model" in error.message
    # its own reviewer model is what is checked, not the run's
    error = refused(service(model("m"), policy=REVIEW, reviewer=plain))
    assert error.details["model"] == "local"
    # a policy that never reviews needs no reviewer
    svc = service(plain, policy=Policy(), tools=False)
    svc.check_can_run()


def test_a_reviewer_setting_its_model_cannot_honour_is_an_error() -> None:
    policy = Policy(rules=REVIEW.rules, reviewer=ReviewerConfig(max_output_tokens=4096))
    small = model("small", max_output_tokens=1024)
    error = refused(service(model("m"), policy=policy, reviewer=small))
    assert (
        "[reviewer] max_output_tokens = 4096" in error.message and "at most 1024" in error.message
    )
    assert error.details["setting"] == "max_output_tokens"


def test_automatic_compaction_needs_a_structured_summarizer() -> None:
    plain = model("local", structured_output=False, context_window=32_000)
    error = refused(service(plain, compaction=CompactionSettings()))
    assert error.details == {
        "model": "local",
        "role": "summarizer",
        "capability": "structured output",
    }
    assert "summarizer_model" in error.message and "auto = false" in error.message
    # a structured summarizer of its own serves it; so does turning automatic compaction off
    service(plain, compaction=CompactionSettings(), summarizer=model("sum")).check_can_run()
    service(plain, compaction=CompactionSettings(auto=False)).check_can_run()
    # without a known window automatic compaction cannot budget the run: the RFC's error
    with pytest.raises(TokenMeterModelUnconfiguredError):
        service(
            model("x", structured_output=False), compaction=CompactionSettings()
        ).check_can_run()


def test_a_cost_ceiling_needs_prices_for_every_model_the_run_calls() -> None:
    budget = Budget(max_cost_usd=1.0)
    error = refused(service(model("m", **PRICED), policy=REVIEW, reviewer=model("judge")), budget)
    assert "'judge' declares none" in error.message
    svc = service(model("m", **PRICED), policy=REVIEW, reviewer=model("judge", **PRICED))
    svc.check_can_run(budget)


def test_a_queued_run_is_checked_when_submitted_and_when_a_worker_takes_it() -> None:
    svc = service(model("local", structured_output=False), policy=REVIEW)
    with pytest.raises(ConfigError, match="lacks structured output"):
        asyncio.run(svc.submit("s1", "go"))
    assert asyncio.run(svc.store.list_runs()) == []
    # an API process without a model queues it; the worker's model is checked on claim
    store = MemoryStore()
    asyncio.run(store.create_session(Session(id="s1", created_at=1.0)))
    api = AgentService.build(
        store=store, artifacts=store, model=None, clock=FixedClock(), ids=SequentialIds()
    )
    asyncio.run(api.submit("s1", "go"))
    worker = service(model("local", structured_output=False), policy=REVIEW, store=store)
    claimed = asyncio.run(store.claim_queued_run(owner="t", now=1.0, expires_at=100.0))
    assert claimed is not None
    result = asyncio.run(worker.execute(claimed))
    assert result.run.status is RunStatus.FAILED and result.run.error is not None
    assert result.run.error.code == "config_error"
    assert "lacks structured output" in result.run.error.message


def test_the_check_itself_names_each_role() -> None:
    ok = model("ok", **PRICED)
    check_run_capabilities(RunModelsNeeded(assistant=ok, tools=3, reviewer=ok, summarizer=ok))
    check_run_capabilities(RunModelsNeeded(assistant=model("no-tools", tool_calls=False)))
    with pytest.raises(ConfigError, match=r"'plain' \(summarizer\) lacks structured output"):
        check_run_capabilities(
            RunModelsNeeded(assistant=ok, summarizer=model("plain", structured_output=False))
        )
