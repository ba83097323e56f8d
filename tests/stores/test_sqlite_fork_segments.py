"""SQLite forks that do not copy: a fork writes no membership row per message, and a store
written before (schema 2, branches holding copied rows) is upgraded and reads, forks,
appends, searches and expires exactly as before, beside branches made after."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

from plait.adapters.stores.sqlite.conn import SCHEMA_VERSION
from plait.adapters.stores.sqlite.store import SqliteStore
from tests.contract.fork_chain_contract import append, copied_branch_reads_alike, said
from tests.contract.retention_contract import fork, seed


def _rows(path: Path, sql: str, *args: object) -> list[tuple[object, ...]]:
    with sqlite3.connect(path) as conn:
        rows = conn.execute(sql, args).fetchall()
    conn.close()
    return rows


def test_a_fork_copies_no_membership_rows(tmp_path: Path) -> None:
    path = tmp_path / "plait.db"

    async def go() -> None:
        store = SqliteStore.open(path)
        try:
            await seed(store)
            await fork(store, "s1", "b1", 5)
            await fork(store, "b1", "c1", 3)
            await append(store, "b1", said("x1", "own"))
        finally:
            await store.close()

    asyncio.run(go())
    members = "SELECT count(*) FROM session_messages WHERE session_id = ?"
    assert _rows(path, members, "b1") == [(1,)]  # only its own message
    assert _rows(path, members, "c1") == [(0,)]
    segments = "SELECT owner_id, lo, hi FROM session_segments WHERE session_id = ? ORDER BY lo"
    assert [r[:2] for r in _rows(path, segments, "c1")] == [("s1", 1), ("c1", 4)]
    assert _rows(path, segments, "c1")[0][2] == 3


def _make_schema_2_store(path: Path) -> None:
    """s1 (6 messages, summary through 4) and "old", a branch at 4 with one message of its
    own, stored as schema 2 stored branches: a copied membership row per message."""

    async def make() -> None:
        store = SqliteStore.open(path)
        try:
            await seed(store)
            await fork(store, "s1", "old", 4)
            await append(store, "old", said("x1", "branch zebra"))
        finally:
            await store.close()

    asyncio.run(make())
    with sqlite3.connect(path) as conn:
        conn.execute(
            "INSERT INTO session_messages (session_id, seq, message_id, message_pk) "
            "SELECT 'old', seq, message_id, message_pk FROM session_messages "
            "WHERE session_id = 's1' AND seq <= 4 ORDER BY seq"
        )
        conn.execute("DROP TABLE session_segments")
        conn.execute("ALTER TABLE sessions DROP COLUMN model")
        conn.execute("UPDATE meta SET value = '2' WHERE key = 'schema_version'")
    conn.close()


def test_a_schema_2_store_with_copied_branches_is_upgraded_and_reads_alike(
    tmp_path: Path,
) -> None:
    path = tmp_path / "plait.db"
    _make_schema_2_store(path)
    assert _rows(path, "SELECT count(*) FROM session_messages WHERE session_id = 'old'") == [(5,)]

    async def go() -> None:
        store = SqliteStore(path)
        try:
            await copied_branch_reads_alike(store)
        finally:
            await store.close()

    asyncio.run(go())
    assert _rows(path, "SELECT value FROM meta WHERE key = 'schema_version'") == [
        (str(SCHEMA_VERSION),)
    ]
    assert SCHEMA_VERSION == 4
