"""A principal's sessions come from an (owner, created_at) index on the SQL stores, not
from a scan of everyone's; a store made before the index existed gets it on open."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import psycopg

from plait.adapters.stores.postgres.sql import session_page
from plait.adapters.stores.postgres.store import PostgresStore
from plait.adapters.stores.sqlite.store import SqliteStore
from tests.contract.builders import new_session
from tests.pg import empty_database


def _sqlite_with_sessions(path: Path) -> None:
    async def go() -> None:
        store = SqliteStore.open(path)
        for i in range(40):
            owner = "alice" if i % 2 else "bob"
            await store.create_session(new_session(f"s{i:02d}", created_at=float(i), owner=owner))
        await store.close()

    asyncio.run(go())


def test_sqlite_lists_an_owners_sessions_from_the_index(tmp_path: Path) -> None:
    path = tmp_path / "plait.db"
    _sqlite_with_sessions(path)
    with sqlite3.connect(path) as conn:
        for before in (None, "s21"):
            sql, args = session_page_sqlite(owner="alice", before=before)
            plan = " ".join(str(r) for r in conn.execute(f"EXPLAIN QUERY PLAN {sql}", args))
            assert "sessions_by_owner" in plan, plan
            assert "SCAN" not in plan and "TEMP B-TREE" not in plan, plan  # no scan, no sort
    conn.close()


def session_page_sqlite(*, owner: str, before: str | None) -> tuple[str, tuple[object, ...]]:
    from plait.adapters.stores.shared.session_pages import session_page_sql

    return session_page_sql("s.id", "rowid", "?", owner=owner, before=before, limit=5)


def test_an_older_sqlite_store_gets_the_index_on_open(tmp_path: Path) -> None:
    path = tmp_path / "plait.db"
    _sqlite_with_sessions(path)
    with sqlite3.connect(path) as conn:
        conn.execute("DROP INDEX sessions_by_owner")
    conn.close()

    async def go() -> list[str]:
        store = SqliteStore.open(path)
        try:
            return [s.id for s in await store.list_sessions(owner="alice", limit=3)]
        finally:
            await store.close()

    assert asyncio.run(go()) == ["s39", "s37", "s35"]
    with sqlite3.connect(path) as conn:
        names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='index'")}
    conn.close()
    assert "sessions_by_owner" in names


def test_postgres_lists_an_owners_sessions_from_the_index(pg_url: str) -> None:
    empty_database(pg_url)

    async def fill() -> None:
        store = PostgresStore(pg_url)
        try:
            for i in range(40):
                owner = "alice" if i % 2 else "bob"
                s = new_session(f"s{i:02d}", created_at=float(i), owner=owner)
                await store.create_session(s)
        finally:
            await store.close()

    asyncio.run(fill())
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("ANALYZE sessions")
        conn.execute("SET enable_seqscan = off")  # a tiny table: ask whether it *can*
        for before in (None, "s21"):
            sql, args = session_page(owner="alice", before=before, limit=5)
            plan = " ".join(r[0] for r in conn.execute(f"EXPLAIN {sql}", args))
            assert "sessions_by_owner" in plan, plan
