"""Recall and search on a branch see only the branch's own prefix (and what followed on
the branch), in every store."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from plait.adapters.stores import Store
from plait.adapters.stores.jsonl.store import JsonlStore
from plait.adapters.stores.memory.store import MemoryStore
from plait.adapters.stores.postgres.store import PostgresStore
from plait.adapters.stores.sqlite.store import SqliteStore
from plait.application.compaction import recall_tool
from plait.application.fork import ForkService
from plait.application.ports import Commit, ToolInvocation
from plait.domain.messages import ToolCall, UserMessage
from plait.domain.session import Session
from plait.testing import FixedClock
from tests.compaction.conftest import coding_history, run
from tests.pg import empty_database


def stores(tmp_path: Path, request: pytest.FixtureRequest) -> dict[str, Any]:
    def postgres() -> Store:
        url: str = request.getfixturevalue("pg_url")
        empty_database(url)
        return PostgresStore(url)

    return {
        "memory": MemoryStore,
        "sqlite": lambda: SqliteStore.open(tmp_path / "db" / "plait.db"),
        "jsonl": lambda: JsonlStore(tmp_path / "jsonl"),
        "postgres": postgres,
    }


@pytest.mark.parametrize("kind", ["memory", "sqlite", "jsonl", "postgres"])
def test_a_branch_cannot_recall_what_came_after_its_fork_point(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    store: Store = stores(tmp_path, request)[kind]()

    async def go() -> None:
        await store.create_session(Session(id="src", created_at=0.0))
        history = coding_history(20)  # 61 messages
        later = UserMessage(id="m62", text="secret plan: rotate the zebra keys", created_at=9)
        await store.commit(Commit(session_id="src", expected_version=0, messages=(*history, later)))
        forks = ForkService(store=store, clock=FixedClock())
        branch = (await forks.fork_session("src", "m40", "req-1")).branch
        tool = recall_tool(store)

        async def recall(session_id: str, **args: Any) -> Any:
            call = ToolCall.create(id="r", name="recall", arguments=args)
            return await tool.execute(
                ToolInvocation(
                    call=call,
                    session_id=session_id,
                    run_id="r",
                    workspace=None,
                    idempotency_key="k",
                )
            )

        assert not (await recall("src", message_id="m62")).failed
        assert "zebra" in (await recall("src", query="zebra keys")).content
        gone = await recall(branch.id, message_id="m62")
        assert gone.failed and gone.content.startswith("missing:")
        assert (await recall(branch.id, query="zebra keys")).failed
        assert await store.search_history(branch.id, "test_case_19") == []
        hits = await store.search_history(branch.id, "test_case_3")
        assert [sm.message.id for sm in hits] == ["m10", "m9"]
        await store.close()

    run(go())
