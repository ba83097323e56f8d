"""Continuity inside one process: a queued run claimed by a worker continues the trace
its submission began; a fork links to its source session's trace; content capture."""

from __future__ import annotations

import asyncio
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import StatusCode

from plait.adapters.stores.memory.store import MemoryStore
from plait.application.fork import ForkService
from plait.application.service import AgentService
from plait.application.worker import Worker
from plait.domain.runs import RunStatus
from plait.entrypoints.http.events import encode_event
from plait.testing import FixedClock, ScriptedModel, SequentialIds, echo_tool
from tests.telemetry.conftest import Otel, make_otel, parent_id


def attrs(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


def agent(otel: Otel, *turns: dict[str, Any]) -> tuple[AgentService, MemoryStore]:
    store = MemoryStore()
    model = ScriptedModel({"version": 1, "assistant": list(turns)})
    service = AgentService.build(
        store=store,
        artifacts=store,
        model=model,
        tools=[echo_tool().tool],
        clock=FixedClock(),
        ids=SequentialIds(),
        owner="test",
        telemetry=otel.telemetry,
    )
    return service, store


ECHO = {"tool_calls": [{"id": "c1", "name": "echo", "arguments": {"text": "secret argument"}}]}


def test_a_queued_run_claimed_by_a_worker_continues_the_trace_of_its_submission(
    otel: Otel,
) -> None:
    service, store = agent(otel, {"text": "Hi."})

    async def go() -> str:
        session = await service.create_session()
        queued = await service.submit(session.id, "hello")
        assert queued.trace_context is not None
        assert (await store.get_run(queued.id)).trace_context == queued.trace_context
        worker = Worker(service=service, queue=store, encode=encode_event, poll_seconds=0.01)
        stop = asyncio.Event()
        task = asyncio.create_task(worker.run(stop))
        async with asyncio.timeout(10):
            while not (await store.get_run(queued.id)).status.terminal:  # noqa: ASYNC110
                await asyncio.sleep(0.01)
        stop.set()
        await task
        assert await store.count_queued_runs(now=service.clock.now()) == 0
        return queued.id

    run_id = asyncio.run(go())
    submitted, claimed = [s for s in otel.finished() if s.name == "invoke_agent plait"]
    assert attrs(submitted)["plait.run.segment"] == "queued"
    assert attrs(submitted)["plait.run.status"] == "queued"
    assert attrs(claimed)["plait.run.segment"] == "claimed"
    assert attrs(claimed)["plait.run.status"] == "completed"
    (root,) = [s for s in otel.finished() if s.name == "plait.run"]
    assert root.parent is None
    assert {parent_id(submitted), parent_id(claimed)} == {root.context.span_id}
    assert attrs(root)["plait.run.id"] == run_id
    assert [link.context.span_id for link in claimed.links] == [root.context.span_id]
    assert claimed.context.trace_id == submitted.context.trace_id
    assert attrs(claimed)["plait.run.id"] == run_id
    assert len(otel.points("plait.queue.claim_latency")) == 1
    assert [attributes for attributes, _ in otel.points("plait.queue.depth")] == [{}]


def test_a_fork_links_to_its_source_sessions_trace(otel: Otel) -> None:
    service, store = agent(otel, {"text": "Hi."})
    forks = ForkService(store=store, clock=FixedClock(), telemetry=otel.telemetry)

    async def go() -> tuple[str, str]:
        session = await service.create_session()
        result = await service.send(session.id, "hello")
        answer = result.messages[-1].message.id
        branch = await forks.fork_session(session.id, answer, "req-1")
        return session.id, branch.branch.id

    source, branch = asyncio.run(go())
    (root,) = [s for s in otel.finished() if s.name == "plait.run"]
    (fork,) = [s for s in otel.finished() if s.name == "fork_session"]
    assert [link.context.span_id for link in fork.links] == [root.context.span_id]
    assert fork.links[0].context.trace_id == root.context.trace_id
    assert attrs(fork)["plait.fork.source_session_id"] == source
    assert attrs(fork)["gen_ai.conversation.id"] == branch


def test_contents_are_recorded_only_when_capture_is_on() -> None:
    def run(otel: Otel) -> dict[str, dict[str, Any]]:
        service, _ = agent(otel, ECHO, {"text": "Echoed."})

        async def go() -> None:
            session = await service.create_session()
            assert (await service.send(session.id, "echo it")).run.status is RunStatus.COMPLETED

        asyncio.run(go())
        return {s.name.split(" ")[0]: attrs(s) for s in otel.finished()}

    plain = run(make_otel())
    captured = run(make_otel(capture_content=True))
    keys = ("gen_ai.tool.call.arguments", "gen_ai.tool.call.result")
    assert not any(k in plain["execute_tool"] for k in keys)
    assert "gen_ai.input.messages" not in plain["invoke_agent"]
    assert "secret argument" in captured["execute_tool"]["gen_ai.tool.call.arguments"]
    assert "secret argument" in captured["execute_tool"]["gen_ai.tool.call.result"]
    assert "echo it" in captured["invoke_agent"]["gen_ai.input.messages"]
    assert "Echoed." in captured["invoke_agent"]["gen_ai.output.messages"]


def test_a_failed_run_sets_error_status_and_its_stable_code(otel: Otel) -> None:
    service, _ = agent(otel, {"error": "authentication"})

    async def go() -> str:
        session = await service.create_session()
        run = (await service.send(session.id, "hello")).run
        assert run.status is RunStatus.FAILED and run.error is not None
        return run.error.code

    code = asyncio.run(go())
    spans = {s.name.split(" ")[0]: s for s in otel.finished()}
    root, chat = spans["invoke_agent"], spans["chat"]
    assert root.status.status_code is StatusCode.ERROR and attrs(root)["error.type"] == code
    assert attrs(root)["plait.run.status"] == "failed"
    assert chat.status.status_code is StatusCode.ERROR
    assert attrs(chat)["error.type"] == "authentication"
    assert {a.get("error.type") for a, _ in otel.points("gen_ai.client.operation.duration")} == {
        "authentication"
    }


def reviewed(otel: Otel, reviewer: list[dict[str, Any]]) -> tuple[AgentService, ScriptedModel]:
    """A service whose policy sends every echo call to the Reviewer role (the run's model,
    answering ``reviewer``)."""
    from plait.application.governance.gate import GovernedGate
    from plait.application.governance.governor import Governor
    from plait.application.governance.reviewer import Reviewer
    from plait.domain.policy import Action, Policy, ToolRule

    policy = Policy(rules=(ToolRule(name="review-echo", action=Action.REVIEW, tools=("echo",)),))
    store, clock, ids = MemoryStore(), FixedClock(), SequentialIds()
    model = ScriptedModel(
        {"version": 1, "assistant": [ECHO, {"text": "Echoed."}], "reviewer": reviewer}
    )
    governor = Governor(
        policy=policy,
        approvals=store,
        clock=clock,
        ids=ids,
        reviewer=Reviewer(config=policy.reviewer, name=model.name),
    )
    service = AgentService.build(
        store=store,
        artifacts=store,
        model=model,
        tools=[echo_tool().tool],
        clock=clock,
        ids=ids,
        owner="test",
        gate=GovernedGate(governor),
        telemetry=otel.telemetry,
    )
    return service, model


def test_a_reviewed_call_has_the_reviewers_model_call_and_its_decision(otel: Otel) -> None:
    decision = {"structured": {"decision": "allow", "reason": "harmless echo"}}
    service, model = reviewed(otel, [decision])

    async def go() -> None:
        session = await service.create_session()
        assert (await service.send(session.id, "echo it")).run.status is RunStatus.COMPLETED

    asyncio.run(go())
    spans = otel.finished()
    (review,) = [s for s in spans if s.name == "review echo"]
    (tool,) = [s for s in spans if s.name == "execute_tool echo"]
    (judged,) = [s for s in spans if s.name.startswith("chat") and s.parent == review.context]
    assert attrs(judged)["plait.model.role"] == "reviewer"
    assert review.parent is not None and review.parent.span_id == tool.context.span_id
    assert review.status.status_code is StatusCode.UNSET
    outcome = attrs(review)
    assert outcome["plait.review.decision"] == "allow"
    assert outcome["plait.review.reason"] == "harmless echo"
    assert outcome["plait.review.reviewer"] == model.name
    assert outcome["plait.review.model_calls"] == 1
    assert outcome["gen_ai.tool.call.id"] == "c1"
    assert outcome["gen_ai.evaluation.score.label"] == "allow"
    assert outcome["gen_ai.evaluation.explanation"] == "harmless echo"
    (result,) = review.events
    assert result.name == "gen_ai.evaluation.result"
    assert dict(result.attributes or {})["gen_ai.evaluation.score.label"] == "allow"
    assistant = [s for s in spans if attrs(s).get("plait.model.role") == "assistant"]
    assert all(s.parent is not None and s.parent != review.context for s in assistant)
    roles = [attrs(s)["plait.model.role"] for s in otel.finished() if s.name.startswith("chat")]
    assert roles == ["assistant", "reviewer", "assistant"]
    (tool,) = [s for s in otel.finished() if s.name == "execute_tool echo"]
    assert attrs(tool)["plait.gate.decision"] == "allow"
    assert attrs(tool)["plait.gate.decided_by"] == f"reviewer:{model.name}"
    assert attrs(tool)["plait.gate.reason"].startswith("harmless echo")


def test_a_claimed_run_its_worker_cannot_run_gets_its_failed_segment(otel: Otel) -> None:
    """The worker's model fails the capability check in ``execute`` before the run is
    driven: the run fails ``config_error`` and its claimed segment says so."""
    store, clock, ids = MemoryStore(), FixedClock(), SequentialIds()
    api = AgentService.build(
        store=store,
        artifacts=store,
        model=ScriptedModel({"version": 1}),
        clock=clock,
        ids=ids,
        owner="api",
        telemetry=otel.telemetry,
    )
    no_tools = ScriptedModel({"version": 1, "capabilities": {"tool_calls": False}})
    worker = AgentService.build(
        store=store,
        artifacts=store,
        model=no_tools,
        tools=[echo_tool().tool],
        clock=clock,
        ids=ids,
        owner="w",
        telemetry=otel.telemetry,
    )

    async def go() -> str:
        session = await api.create_session()
        queued = await api.submit(session.id, "hello")
        now = clock.now()
        claimed = await store.claim_queued_run(owner="w", now=now, expires_at=now + 60)
        assert claimed is not None
        run = (await worker.execute(claimed)).run
        assert run.status is RunStatus.FAILED and run.error is not None
        assert run.error.code == "config_error"
        assert (await store.get_run(queued.id)).trace_context == queued.trace_context
        return queued.id

    run_id = asyncio.run(go())
    submitted, failed = [s for s in otel.finished() if s.name == "invoke_agent plait"]
    assert attrs(failed)["plait.run.segment"] == "claimed"
    assert attrs(failed)["plait.run.id"] == run_id
    assert attrs(failed)["plait.run.status"] == "failed"
    assert failed.status.status_code is StatusCode.ERROR
    assert attrs(failed)["error.type"] == "config_error"
    (root,) = [s for s in otel.finished() if s.name == "plait.run"]
    assert {parent_id(failed), parent_id(submitted)} == {root.context.span_id}
    assert {a["plait.run.status"]: v for a, v in otel.points("plait.runs")} == {
        "queued": 1,
        "failed": 1,
    }


def test_a_review_that_goes_wrong_is_an_error_span_and_asks_a_person(otel: Otel) -> None:
    """The reviewer answers nothing valid (past its corrections): the fail-closed
    ``ask_user`` decision, and the review span's error status and ``error.type``."""
    from plait.domain.policy import ReviewerConfig

    asked = ReviewerConfig().max_corrections + 1  # the first answer, then each correction
    service, _ = reviewed(otel, [{"text": "sure, fine"}] * asked)

    async def go() -> RunStatus:
        session = await service.create_session()
        return (await service.send(session.id, "echo it")).run.status

    assert asyncio.run(go()) is RunStatus.AWAITING_APPROVAL
    spans = otel.finished()
    (review,) = [s for s in spans if s.name == "review echo"]
    judged = [s for s in spans if s.parent is not None and s.parent == review.context]
    assert len(judged) == asked and all(attrs(s)["plait.model.role"] == "reviewer" for s in judged)
    assert review.status.status_code is StatusCode.ERROR
    outcome = attrs(review)
    assert outcome["error.type"] == "invalid_model_output"
    assert outcome["plait.review.decision"] == "ask_user"
    assert outcome["plait.review.model_calls"] == asked
    assert "correction" in str(outcome["plait.review.reason"])
    (tool,) = [s for s in spans if s.name == "execute_tool echo"]
    assert attrs(tool)["plait.gate.decision"] == "needs_approval"
