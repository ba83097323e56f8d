"""The SQLite store's read of a session and its history (what a run starts from) reads
only what can hold the history: nothing more for a session without messages, its own rows
for a session that is not a branch, its segments for a branch."""

from __future__ import annotations

import asyncio
from pathlib import Path

from plait.adapters.stores.sqlite.conn import MMAP_BYTES
from plait.adapters.stores.sqlite.store import SqliteStore
from plait.application.ports import Commit
from tests.contract.builders import mixed_history, new_session, user
from tests.contract.retention_contract import fork, seed

SEGMENTS = "SELECT owner_id, lo, hi FROM session_segments"
"""A read of a session's segments."""


def statements(store: SqliteStore) -> list[str]:
    seen: list[str] = []
    conn = store._db._conn
    assert conn is not None
    conn.set_trace_callback(seen.append)
    return seen


def test_a_session_without_messages_is_read_from_its_row_alone(tmp_path: Path) -> None:
    async def go() -> None:
        store = SqliteStore(tmp_path / "s.db", io="inline")
        await store.create_session(new_session("s1"))
        seen = statements(store)
        session, history = await store.read_history("s1")
        assert (session.version, history) == (0, [])
        assert not [s for s in seen if "FROM session_messages AS sm" in s or SEGMENTS in s]
        await store.close()

    asyncio.run(go())


def test_a_plain_session_reads_its_own_rows_without_segments(tmp_path: Path) -> None:
    async def go() -> None:
        store = SqliteStore(tmp_path / "s.db", io="inline")
        await seed(store, summarized=None)
        stored = [sm.message for sm in await store.read_messages("s1")]
        seen = statements(store)
        session, history = await store.read_history("s1")
        assert history == stored
        assert session.version == len(history) > 0
        assert not [s for s in seen if SEGMENTS in s]
        await store.close()

    asyncio.run(go())


def test_a_branch_reads_its_prefix_and_its_own_messages(tmp_path: Path) -> None:
    async def go() -> None:
        store = SqliteStore(tmp_path / "s.db", io="inline")
        await seed(store, summarized=None)
        parent = [sm.message for sm in await store.read_messages("s1")]
        await fork(store, "s1", "b1", 3)
        # a branch without messages of its own: its version is its fork point
        session, history = await store.read_history("b1")
        assert (session.version, history) == (3, parent[:3])
        await store.commit(Commit(session_id="b1", expected_version=3, messages=(user("b-1"),)))
        session, history = await store.read_history("b1")
        assert session.version == 4
        assert history == [*parent[:3], user("b-1")]
        assert history == [sm.message for sm in await store.read_messages("b1")]
        await store.close()

    asyncio.run(go())


def test_the_file_is_read_through_a_memory_map_with_the_same_history(tmp_path: Path) -> None:
    """The store reads its file through a memory map; what it reads is what it reads
    with each page copied into SQLite's cache (the immutable connection of a read-only
    place maps it too: tests/cli/test_first_use.py reads through one)."""

    async def go() -> None:
        store = SqliteStore(tmp_path / "s.db", io="inline")
        await store.create_session(new_session("s1"))
        history = mixed_history()
        for version, message in enumerate(history):
            await store.commit(
                Commit(session_id="s1", expected_version=version, messages=(message,))
            )
        conn = store._db._conn
        assert conn is not None
        assert conn.execute("PRAGMA mmap_size").fetchone()[0] == MMAP_BYTES
        mapped = await store.read_history("s1")
        conn.execute("PRAGMA mmap_size = 0")
        assert await store.read_history("s1") == mapped
        assert mapped[1] == history
        await store.close()

    asyncio.run(go())
