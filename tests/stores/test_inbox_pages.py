"""The cross-session inbox pages (pending approvals, runs awaiting resolution) are read
from indexes, not by scanning every approval or run ever stored (issue 24)."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import psycopg

from plait.adapters.stores.postgres.sql import RUN_COLS
from plait.adapters.stores.postgres.store import PostgresStore
from plait.adapters.stores.shared.inbox_pages import pending_approvals_sql, waiting_runs_sql
from plait.adapters.stores.sqlite import approvals as _approvals_sqlite
from plait.adapters.stores.sqlite.store import SqliteStore
from plait.domain.runs import RunStatus
from tests.pg import empty_database

CASES = [(owner, before) for owner in (None, "alice") for before in (None, "x1")]


def _queries(tie: str, mark: str) -> list[tuple[str, str, tuple[object, ...]]]:
    out = []
    for owner, before in CASES:
        sql, args = pending_approvals_sql(tie, mark, owner=owner, before=before, limit=5)
        out.append(("approvals_pending", sql, args))
        sql, args = waiting_runs_sql(
            RUN_COLS,
            tie,
            mark,
            status=RunStatus.AWAITING_RESOLUTION,
            owner=owner,
            before=before,
            limit=5,
        )
        out.append(("runs_waiting", sql, args))
    return out


def test_sqlite_reads_the_inbox_from_indexes(tmp_path: Path) -> None:
    path = tmp_path / "plait.db"
    asyncio.run(SqliteStore.open(path).close())
    with sqlite3.connect(path) as conn:
        _approvals_sqlite._ensure(conn)  # the table and its indexes, as the first request
        for index, sql, args in _queries("rowid", "?"):
            plan = " ".join(str(r) for r in conn.execute(f"EXPLAIN QUERY PLAN {sql}", args))
            assert index in plan, plan
            # a scan only of the partial index (what waits), never of a table
            assert "SCAN x'" not in plan and "SCAN s'" not in plan, plan
            assert "TEMP B-TREE" not in plan, plan  # read in page order: no sort either
    conn.close()


async def _prepared(url: str) -> None:
    store = PostgresStore(url)
    try:
        await store.list_sessions(limit=1)  # the schema is created on first use
    finally:
        await store.close()


def test_postgres_reads_the_inbox_from_indexes(pg_url: str) -> None:
    empty_database(pg_url)
    asyncio.run(_prepared(pg_url))
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("SET enable_seqscan = off")  # tiny tables: ask whether it *can*
        for index, sql, args in _queries("ord", "%s"):
            plan = " ".join(r[0] for r in conn.execute(f"EXPLAIN {sql}", args))
            # on empty tables PostgreSQL may as well pick the other partial index of runs
            # not ended; either reads only what has not ended
            assert index in plan or (index == "runs_waiting" and "runs_live" in plan), plan
            assert "Seq Scan" not in plan, plan
