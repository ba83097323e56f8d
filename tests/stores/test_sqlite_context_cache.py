"""SQLite answers a step's context read (active summary and constraints) without going to
its I/O thread while no other connection committed since it last read them; another
connection's change is seen from this store's next commit on, its own writes at once."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

from plait.adapters.stores.sqlite import SqliteStore
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
