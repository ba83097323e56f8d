"""Recovery respects decisions: a denied call is never run by recovery; a reviewer that
hangs never lets a call through."""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import replace

from plait.adapters.stores.memory.store import MemoryStore
from plait.application.ports import ModelRequest, ModelResponse, RawToolCall
from plait.domain.messages import ToolStatus
from plait.domain.policy import Action, Policy, ToolRule
from plait.domain.runs import RunStatus
from plait.testing import FunctionModel
from tests.governance.test_runs import DEPLOY_EDIT, REVIEW_EDITS, Rig

DENY_DEPLOY = Policy(
    rules=(ToolRule(name="no-deploy", action=Action.DENY, paths=("deploy/**",), reason="frozen"),)
)


class Crash(BaseException):
    """The process dies here."""


def test_recovery_never_runs_a_denied_call() -> None:
    store = MemoryStore()
    asked: list[ModelRequest] = []

    def first_life(request: ModelRequest) -> ModelResponse:
        asked.append(request)
        if len(asked) == 1:
            return ModelResponse(
                tool_calls=(RawToolCall(id="c1", name="edit_file", arguments=DEPLOY_EDIT),)
            )
        raise Crash  # dies after the denial was saved, while asking the model again

    dead = Rig(DENY_DEPLOY, FunctionModel(first_life, name="fn"), store=store)
    dead.session()
    with contextlib.suppress(Crash):
        dead.send("edit deploy")
    (run,) = asyncio.run(store.list_runs())
    assert run.status is RunStatus.RUNNING and dead.editor.calls == []

    def second_life(request: ModelRequest) -> ModelResponse:
        last = request.context.items[-1]
        assert last.kind == "tool_result" and last.result.status is ToolStatus.DENIED
        return ModelResponse(text="left it alone")

    alive = Rig(DENY_DEPLOY, FunctionModel(second_life, name="fn"), store=store, tag="b")
    alive.clock.advance(120)  # the lease has expired; the run's 600 s deadline has not
    (report,) = asyncio.run(alive.service.recover())
    done = asyncio.run(alive.store.get_run(run.id))
    assert done.status is RunStatus.COMPLETED, report
    assert dead.editor.calls == [] and alive.editor.calls == []
    results = [
        m.message.result
        for m in asyncio.run(store.read_messages("s1"))
        if m.message.kind == "tool_result"
    ]
    assert [(r.call_id, r.status) for r in results] == [("c1", ToolStatus.DENIED)]


def test_a_reviewer_that_never_answers_never_lets_the_call_run() -> None:
    async def model(request: ModelRequest) -> ModelResponse:
        if request.role == "reviewer":
            await asyncio.Event().wait()
        return ModelResponse(
            tool_calls=(RawToolCall(id="c1", name="edit_file", arguments=DEPLOY_EDIT),)
        )

    policy = replace(REVIEW_EDITS, reviewer=replace(REVIEW_EDITS.reviewer, timeout_seconds=0.05))
    rig = Rig(policy, FunctionModel(model, name="fn"))
    rig.session()
    result = rig.send("go")
    assert result.run.status is RunStatus.AWAITING_APPROVAL and rig.editor.calls == []
    (record,) = asyncio.run(rig.store.get_executions(result.run.id))
    assert record.decision == "needs_approval"
    assert "did not answer within 0.05 s" in (record.decision_reason or "")
