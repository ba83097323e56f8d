"""Compaction on a branch whose parent has grown, been compacted, been forked again and
had its raw history expired, in every store: the branch's context, summary and recall
are made of the branch's own history only."""

from __future__ import annotations

from pathlib import Path

import pytest

from plait.adapters.stores import Store
from plait.application.fork import ForkService
from plait.application.retention import RetentionRequest, RetentionService
from plait.domain.messages import UserMessage
from plait.testing import FixedClock
from tests.compaction.conftest import MODEL, Bench, coding_history, good_summary, run, scripted
from tests.compaction.test_fork_recall import stores

NOW = 1_700_000_000.0


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["memory", "sqlite", "jsonl", "postgres"])
def test_compaction_on_a_branch_of_a_parent_that_moved_on(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    store: Store = stores(tmp_path, request)[kind]()
    bench = Bench(scripted([good_summary()] * 3), store=store)  # type: ignore[arg-type]

    async def go() -> None:
        await bench.seed(coding_history(20), "src")  # 61 messages
        assert (await bench.service.compact("src", model=MODEL)).status == "compacted"
        forks = ForkService(store=store, clock=FixedClock())
        b1 = (await forks.fork_session("src", "m40", "req-1")).branch
        # the parent grows, is forked again, and its raw history is expired
        later = UserMessage(id="m62", text="secret plan: rotate the zebra keys", created_at=NOW)
        await bench.append([later], "src")
        c1 = (await forks.fork_session(b1.id, "m30", "req-2")).branch
        retention = RetentionService(store=store, clock=FixedClock(NOW))
        report = await retention.apply(
            RetentionRequest(older_than_days=1, session_id="src", force=True)
        )
        assert report.expired
        await bench.append(
            [UserMessage(id="b1-q", text="on the branch: what next?", created_at=10)], b1.id
        )
        parent = await bench.history("src")
        branch = await bench.history(b1.id)
        assert [sm.message.id for sm in branch] == [
            *(sm.message.id for sm in parent[:40]),
            "b1-q",
        ]
        assert [sm.message.id for sm in await bench.history(c1.id)] == [
            sm.message.id for sm in parent[:30]
        ]
        parent_summaries = await store.list_summaries("src")
        outcome = await bench.service.compact(b1.id, model=MODEL)
        assert outcome.status == "compacted", outcome.detail
        summary = await store.get_summary(b1.id)
        assert summary is not None and summary.session_id == b1.id
        assert summary.covered_through_seq <= 41
        assert await store.list_summaries("src") == parent_summaries
        view = await bench.service.view(
            b1.id, [sm.message for sm in branch], model=MODEL, instructions="", tools=()
        )
        assert view.summary == summary
        assert view.tail_from_seq == summary.covered_through_seq + 1
        assert "zebra" not in repr(view.context.items)
        assert await store.search_history(b1.id, "zebra") == []
        assert [sm.message.id for sm in await store.search_history("src", "zebra")] == ["m62"]
        await store.close()

    run(go())
