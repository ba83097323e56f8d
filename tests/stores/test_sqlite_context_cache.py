"""SQLite answers a step's context read (active summary and constraints) without going to
its I/O thread while no other connection committed since it last read them; another
connection's change is seen from this store's next commit on, its own writes at once."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from plait.adapters.stores.sqlite.store import SqliteStore
from plait.application.ports import Commit
from plait.domain.summary import Constraint
from tests.contract.base import started
from tests.contract.builders import user
from tests.contract.summary_contract import history, summary

RULE = Constraint(text="never push to main", source_message_id="m1")


def _counting(store: SqliteStore) -> list[int]:
    """Counts the store's reads on its I/O thread."""
    reads: list[int] = []
    read = store._db.read

    async def counted(op: Callable[[Any], Any]) -> Any:
        reads.append(1)
        return await read(op)

    store._db.read = counted  # type: ignore[method-assign]
    return reads


def test_a_second_read_needs_no_io_while_nothing_else_committed(tmp_path: Path) -> None:
    async def go() -> None:
        store = SqliteStore(tmp_path / "s.db")
        await started(store, *history())
        await store.add_constraints("s1", [RULE])
        reads = _counting(store)
        first = await store.summary_and_constraints("s1")
        assert first == (None, [RULE]) and len(reads) == 1
        assert await store.summary_and_constraints("s1") == first
        assert len(reads) == 1
        await store.close()

    asyncio.run(go())


def test_own_writes_are_seen_at_once(tmp_path: Path) -> None:
    async def go() -> None:
        store = SqliteStore(tmp_path / "s.db")
        await started(store, *history())
        assert await store.summary_and_constraints("s1") == (None, [])
        await store.add_constraints("s1", [RULE])
        assert await store.summary_and_constraints("s1") == (None, [RULE])
        s = summary(4)
        await store.activate_summary(s, expected_generation=0)
        assert await store.summary_and_constraints("s1") == (s, [RULE])
        await store.close()

    asyncio.run(go())


def test_another_connections_change_is_seen_from_the_next_commit_on(tmp_path: Path) -> None:
    async def go() -> None:
        path = tmp_path / "s.db"
        mine, other = SqliteStore(path), SqliteStore(path)
        await started(mine, *history())
        assert await mine.summary_and_constraints("s1") == (None, [])
        await other.add_constraints("s1", [RULE])
        s = summary(4)
        await other.activate_summary(s, expected_generation=0)
        version = (await mine.get_session("s1")).version
        await mine.commit(
            Commit(session_id="s1", expected_version=version, messages=(user("later"),))
        )
        reads = _counting(mine)
        assert await mine.summary_and_constraints("s1") == (s, [RULE])
        assert len(reads) == 1  # the commit saw another connection's change: read again
        await mine.close()
        await other.close()

    asyncio.run(go())


def test_a_change_between_a_read_and_a_commit_queued_behind_it_is_seen(tmp_path: Path) -> None:
    """The read, another connection's write and this store's commit run in that order on
    the I/O thread before the loop sees the read's answer: that answer is not reused."""

    async def go() -> None:
        path = tmp_path / "s.db"
        mine = SqliteStore(path)
        await started(mine, *history())
        version = (await mine.get_session("s1")).version

        def other_writes(_: Any) -> None:
            with sqlite3.connect(path) as conn:
                conn.execute(
                    "INSERT INTO constraint_records (session_id, source_message_id, text) "
                    "VALUES ('s1', 'm1', 'never push to main')"
                )

        await mine.add_constraints("s1", [])  # creates the tables
        read = asyncio.ensure_future(mine.summary_and_constraints("s1"))
        await asyncio.sleep(0)  # the read is queued
        written = asyncio.ensure_future(mine._db.read(other_writes))
        await asyncio.sleep(0)  # queued behind the read
        committed = mine.commit_soon(
            Commit(session_id="s1", expected_version=version, messages=(user("later"),))
        )
        time.sleep(0.3)  # noqa: ASYNC251 (the loop waits: all three ran on the I/O thread)
        assert await read == (None, [])
        await written
        await committed
        assert await mine.summary_and_constraints("s1") == (None, [RULE])
        await mine.close()

    asyncio.run(go())
