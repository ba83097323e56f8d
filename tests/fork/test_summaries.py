"""Forking a compacted session (seed section 十, the joint exercise): a summary is
inherited only if it covers nothing after the fork point and its digest matches the
branch's prefix; nothing from after the fork point reaches the branch's next context."""

from __future__ import annotations

from dataclasses import replace

from plait.application.ports import Commit, ForkableStore, ModelRequest, ModelResponse
from plait.application.service import AgentService
from plait.domain.messages import AssistantMessage, Message, UserMessage
from plait.domain.session import Session
from plait.domain.summary import Constraint, SourcedNote, Summary, SummaryBody, source_digest
from plait.testing import FixedClock, FunctionModel, SequentialIds
from tests.fork.conftest import forks_over, run

PLANTED = "DECISION-55: migrate the database to Postgres"


def _history() -> list[Message]:
    out: list[Message] = []
    for i in range(1, 71):
        mid = f"m{i}"
        if i == 1:
            out.append(
                UserMessage(id=mid, text="fix the tests; never touch deploy/", created_at=1.0)
            )
        elif i == 55:
            out.append(AssistantMessage(id=mid, text=PLANTED, created_at=1.0))
        elif i % 2:
            out.append(UserMessage(id=mid, text=f"question {i}", created_at=1.0))
        else:
            out.append(AssistantMessage(id=mid, text=f"answer {i}", created_at=1.0))
    return out


def _summary(sid: str, history: list[Message], through: int, gen: int, **body: object) -> Summary:
    ids = [m.id for m in history[:through]]
    return Summary(
        id=f"sum{gen}",
        session_id=sid,
        generation=gen,
        covered_through_seq=through,
        covered_through_message_id=ids[-1],
        source_digest=source_digest(ids),
        body=SummaryBody(goal="fix the tests", **body),  # type: ignore[arg-type]
        source_tokens=1000,
        summary_tokens=100,
    )


async def _compacted(store: ForkableStore, *summaries: Summary) -> list[Message]:
    history = _history()
    await store.create_session(Session(id="S", created_at=1.0))
    await store.commit(Commit(session_id="S", expected_version=0, messages=tuple(history)))
    for n, s in enumerate(summaries):
        await store.activate_summary(s, expected_generation=n)
    await store.add_constraints(
        "S",
        [
            Constraint(text="never touch deploy/", source_message_id="m1"),
            Constraint(text="keep Postgres config", source_message_id="m55"),
        ],
    )
    return history


def test_summary_past_the_fork_point_is_not_inherited_and_does_not_leak(
    store: ForkableStore,
) -> None:
    async def go() -> None:
        history = _history()
        through_60 = _summary(
            "S",
            history,
            60,
            1,
            decisions=(SourcedNote(text=PLANTED, source_ids=("m55",)),),
        )
        await _compacted(store, through_60)
        result = await forks_over(store).fork_session("S", "m40", "req-1")
        bid = result.branch.id
        assert await store.get_summary(bid) is None
        assert await store.list_summaries(bid) == []
        assert await store.list_constraints(bid) == [
            Constraint(text="never touch deploy/", source_message_id="m1")
        ]
        # The next context the model would see in the branch.
        model = FunctionModel(lambda r: ModelResponse(text="ok"))
        service = AgentService.build(
            store=store,
            artifacts=store,  # type: ignore[arg-type]
            model=model,
            clock=FixedClock(),
            ids=SequentialIds(prefix_tag="b"),
        )
        await service.send(bid, "what did we decide about the database?")
        seen = _visible(model.requests[0])
        assert "DECISION-55" not in seen and "Postgres" not in seen
        assert all(f"answer {i}" not in seen for i in range(42, 61, 2))
        assert "answer 40" in seen
        assert (await store.get_summary("S")) == through_60  # the source keeps its own

    run(go())


def test_the_newest_summary_within_the_prefix_is_inherited(store: ForkableStore) -> None:
    async def go() -> None:
        history = _history()
        older = _summary("S", history, 30, 1)
        newer = _summary("S", history, 60, 2)
        await _compacted(store, older, newer)
        result = await forks_over(store).fork_session("S", "m40", "req-1")
        inherited = await store.get_summary(result.branch.id)
        assert inherited is not None
        assert inherited == replace(
            older, id=inherited.id, session_id=result.branch.id, generation=1
        )
        assert await store.get_summary("S") == newer

    run(go())


def test_a_summary_whose_digest_does_not_match_the_prefix_is_not_inherited(
    store: ForkableStore,
) -> None:
    async def go() -> None:
        history = _history()
        forged = replace(_summary("S", history, 30, 1), source_digest=source_digest(["x"]))
        await _compacted(store, forged)
        result = await forks_over(store).fork_session("S", "m40", "req-1")
        assert await store.get_summary(result.branch.id) is None

    run(go())


def _visible(request: ModelRequest) -> str:
    ctx = request.context
    parts = [ctx.instructions, *(repr(m) for m in ctx.items)]
    return "\n".join(parts)
