"""PostgreSQL answers a step's summary/constraints read from the previous read when the
commit in between found them unchanged (its stamp), without I/O (so the run does not
suspend there); a change by anyone is seen from the next commit on, and without a commit
in between the database is read."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

import pytest

from plait.adapters.stores.postgres.store import PostgresStore
from plait.application.ports import Commit
from plait.domain.summary import Constraint
from tests.contract.builders import assistant, new_session, user
from tests.contract.summary_contract import summary
from tests.pg import empty_database


@pytest.fixture
def url(pg_url: str) -> str:
    empty_database(pg_url)
    return pg_url


def at_once(coro: Coroutine[Any, Any, Any]) -> Any:
    """The coroutine's result if it finishes without suspending, else None."""
    try:
        coro.send(None)
    except StopIteration as done:
        return done.value
    coro.close()
    return None


class Rig:
    def __init__(self, url: str) -> None:
        self.store = PostgresStore(url)
        self.other = PostgresStore(url)
        self.version = 0

    async def seed(self) -> None:
        await self.store.create_session(new_session("s1"))
        messages = tuple(user(f"m{i}") if i % 2 else assistant(f"m{i}") for i in range(1, 5))
        await self.commit(*messages)

    async def commit(self, *messages: Any) -> None:
        c = Commit(session_id="s1", expected_version=self.version, messages=messages)
        self.version = (await self.store.commit(c)).version

    async def close(self) -> None:
        await self.store.close()
        await self.other.close()


def run(url: str, go: Any) -> None:
    async def main() -> None:
        rig = Rig(url)
        try:
            await rig.seed()
            await go(rig)
        finally:
            await rig.close()

    asyncio.run(main())


def test_an_unchanged_state_is_answered_without_io_once_per_commit(url: str) -> None:
    async def go(rig: Rig) -> None:
        s = rig.store
        assert at_once(s.summary_and_constraints("s1")) is None  # nothing known: reads
        read = await s.summary_and_constraints("s1")
        assert read == (None, [])
        await rig.commit(user("m5"))
        assert at_once(s.summary_and_constraints("s1")) == read  # the commit agreed
        # Answered once: without another commit the database is read again.
        assert at_once(s.summary_and_constraints("s1")) is None
        assert await s.summary_and_constraints("s1") == read

    run(url, go)


@pytest.mark.slow
def test_a_change_by_another_process_is_seen_from_the_next_commit_on(url: str) -> None:
    async def go(rig: Rig) -> None:
        s = rig.store
        await s.summary_and_constraints("s1")
        await rig.other.activate_summary(summary(4), expected_generation=0)
        await rig.commit(user("m5"))
        assert at_once(s.summary_and_constraints("s1")) is None  # stamp differs: read
        found, listed = await s.summary_and_constraints("s1")
        assert found is not None and found.generation == 1 and listed == []
        await rig.other.add_constraints("s1", [Constraint(source_message_id="m1", text="k")])
        await rig.commit(assistant("m6"))
        assert at_once(s.summary_and_constraints("s1")) is None
        found, listed = await s.summary_and_constraints("s1")
        assert found is not None and [c.text for c in listed] == ["k"]
        await rig.commit(user("m7"))
        assert at_once(s.summary_and_constraints("s1")) == (found, listed)

    run(url, go)


def test_this_stores_own_writes_and_failed_commits_drop_the_answer(url: str) -> None:
    async def go(rig: Rig) -> None:
        s = rig.store
        await s.summary_and_constraints("s1")
        await rig.commit(user("m5"))
        await s.add_constraints("s1", [Constraint(source_message_id="m1", text="k")])
        assert at_once(s.summary_and_constraints("s1")) is None
        _, listed = await s.summary_and_constraints("s1")
        assert [c.text for c in listed] == ["k"]
        await rig.commit(assistant("m6"))
        await s.activate_summary(summary(4), expected_generation=0)
        assert at_once(s.summary_and_constraints("s1")) is None
        found, _ = await s.summary_and_constraints("s1")
        assert found is not None and found.generation == 1
        stale = Commit(session_id="s1", expected_version=1, messages=(user("x"),))
        with pytest.raises(Exception, match="version"):
            await s.commit(stale)
        assert at_once(s.summary_and_constraints("s1")) is None

    run(url, go)
