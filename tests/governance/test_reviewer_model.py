"""The Reviewer role on its own model (seed article §二): ``[reviewer] model`` in the
policy file, its own instructions, its own share of the run's model-call budget."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from plait.adapters.policy_file import policy_from
from plait.adapters.stores.memory.store import MemoryStore
from plait.application.governance.gate import GovernedGate
from plait.application.governance.governor import Governor
from plait.application.governance.reviewer import Reviewer
from plait.application.model_caller import RetryPolicy
from plait.application.ports import ModelClient
from plait.application.service import AgentService
from plait.domain.errors import ConfigError, PolicyError
from plait.domain.messages import ToolResultMessage
from plait.domain.policy import Action, Policy, ReviewerConfig, ToolRule
from plait.domain.policy_toml import parse_policy
from plait.domain.runs import Budget, RunStatus
from plait.domain.session import Session
from plait.runtime import Runtime
from plait.testing import FixedClock, RecordingTool, ScriptedModel, SequentialIds
from tests.governance.test_runs import DEPLOY_EDIT, EDIT, TEST_EDIT, edit

RULES = (ToolRule(name="review-edits", action=Action.REVIEW, tools=("edit_file",)),)


def judge(*turns: dict[str, Any], **capabilities: Any) -> ScriptedModel:
    script: dict[str, Any] = {"version": 1, "reviewer": list(turns)}
    if capabilities:
        script["capabilities"] = capabilities
    return ScriptedModel(script, name="judge")


def agent(*turns: dict[str, Any]) -> ScriptedModel:
    return ScriptedModel({"version": 1, "assistant": list(turns)}, name="worker")


def service(policy: Policy, model: ModelClient, reviewer: ModelClient | None) -> AgentService:
    store = MemoryStore()
    clock, ids = FixedClock(), SequentialIds()
    governor = Governor(
        policy=policy,
        approvals=store,
        clock=clock,
        ids=ids,
        reviewer=Reviewer(config=policy.reviewer, model=reviewer, name="judge"),
    )
    svc = AgentService.build(
        store=store, artifacts=store, model=model, tools=[RecordingTool(EDIT).tool],
        clock=clock, ids=ids, owner="test", gate=GovernedGate(governor),
        retry=RetryPolicy(max_attempts=1),
    )  # fmt: skip
    asyncio.run(store.create_session(Session(id="s1", created_at=1.0)))
    return svc


def test_the_reviewer_runs_on_its_own_model_with_its_own_instructions() -> None:
    policy = Policy(rules=RULES, reviewer=ReviewerConfig(instructions="Deploy files are sacred."))
    worker = agent(edit("c1", DEPLOY_EDIT), edit("c2", TEST_EDIT), {"text": "done"})
    reviewer = judge(
        {"structured": {"decision": "deny", "reason": "deploy config"}},
        {"structured": {"decision": "allow", "reason": "a test fix"}},
    )
    svc = service(policy, worker, reviewer)
    result = asyncio.run(svc.send("s1", "fix the test, leave deploy alone"))
    assert result.run.status is RunStatus.COMPLETED
    assert {r.role for r in worker.requests} == {"assistant"}  # never asked to review
    assert [r.role for r in reviewer.requests] == ["reviewer", "reviewer"]
    assert reviewer.requests[0].context.instructions.endswith("Deploy files are sacred.")
    assert reviewer.requests[0].context.tools == ()
    # both models' calls come out of the one run budget
    assert result.run.usage.model_calls == 5
    records = {r.call_id: r for r in asyncio.run(svc.store.get_executions(result.run.id))}
    assert records["c1"].decided_by == "reviewer:judge" and records["c1"].decision == "deny"
    worker.assert_complete()
    reviewer.assert_complete()


def test_the_reviewers_share_caps_its_calls_within_the_run_budget() -> None:
    policy = Policy(rules=RULES, reviewer=ReviewerConfig(max_model_calls=1))
    worker = agent(edit("c1", TEST_EDIT), edit("c2", TEST_EDIT))
    reviewer = judge({"structured": {"decision": "allow", "reason": "fine"}})
    svc = service(policy, worker, reviewer)
    result = asyncio.run(svc.send("s1", "go", budget=Budget(max_model_calls=20)))
    # the second review finds the reviewer's share spent: a person decides, nothing runs
    assert result.run.status is RunStatus.AWAITING_APPROVAL
    assert len(reviewer.requests) == 1
    store = svc.store
    assert isinstance(store, MemoryStore)
    (pending,) = asyncio.run(store.list_approvals())
    assert pending.call_id == "c2" and "no model-call budget left for review" in pending.reason


def _policy_file(tmp_path: Path, reviewer: str) -> Path:
    path = tmp_path / "policy.toml"
    path.write_text(
        "version = 1\n[reviewer]\n" + reviewer + "\n"
        '[[rules]]\nname = "review-edits"\ntools = ["edit_file"]\naction = "review"\n',
        encoding="utf-8",
    )
    return path


def _script_file(tmp_path: Path, name: str, script: dict[str, Any]) -> Path:
    path = tmp_path / name
    path.write_text(json.dumps({"version": 1, **script}), encoding="utf-8")
    return path


def test_the_policy_file_names_the_reviewer_model_and_the_runtime_opens_it(
    tmp_path: Path,
) -> None:
    judge_file = _script_file(
        tmp_path, "judge.json", {"reviewer": [{"structured": {"decision": "deny", "reason": "no"}}]}
    )
    worker_file = _script_file(
        tmp_path, "worker.json", {"assistant": [edit("c1", DEPLOY_EDIT), {"text": "ok"}]}
    )
    policy = _policy_file(tmp_path, f'model = "scripted:{judge_file}"\ninstructions = "Be strict."')
    assert policy_from(str(policy)).reviewer.model == f"scripted:{judge_file}"
    editor = RecordingTool(EDIT)

    async def go() -> Any:
        rt = Runtime.open(
            db="memory://", model=f"scripted:{worker_file}", policy=str(policy),
            tools=[editor.tool],
        )  # fmt: skip
        try:
            session = await rt.service.create_session()
            return await rt.service.send(session.id, "go")
        finally:
            await rt.close()

    result = asyncio.run(go())
    assert result.run.status is RunStatus.COMPLETED and editor.calls == []
    (denied,) = [m.message for m in result.messages if isinstance(m.message, ToolResultMessage)]
    assert "denied by reviewer:scripted" in (denied.result.reason or "")


def test_a_reviewer_model_that_cannot_be_opened_fails_at_start(tmp_path: Path) -> None:
    policy = _policy_file(tmp_path, 'model = "nope:judge"')
    with pytest.raises(ConfigError) as info:
        Runtime.open(db="memory://", model=agent(), policy=str(policy), tools=[])
    assert str(policy) in info.value.message
    assert "[reviewer] model 'nope:judge' cannot be opened" in info.value.message
    assert "unknown model kind 'nope'" in info.value.message


def test_the_reviewer_model_setting_is_validated() -> None:
    parsed = parse_policy('version = 1\n[reviewer]\nmodel = "openai:gpt-4o-mini"\n', "p.toml")
    assert parsed.reviewer.model == "openai:gpt-4o-mini"
    assert parse_policy("version = 1\n", "p.toml").reviewer.model == ""
    with pytest.raises(PolicyError, match=r"p.toml, line 3: reviewer.model: must be a model spec"):
        parse_policy("version = 1\n[reviewer]\nmodel = 4\n", "p.toml")


def test_a_run_taken_over_with_another_model_keeps_the_reviewers_own_model() -> None:
    policy = Policy(rules=RULES)
    reviewer = judge()
    svc = service(policy, agent(), reviewer)
    assert svc.caller.model_for("reviewer") is reviewer
    other = agent()
    moved = svc.caller.with_model(other)  # what recovery does for a run's recorded model
    assert moved.model_for("reviewer") is reviewer
    assert moved.model_for("assistant") is other and moved.model_for("summarizer") is other
