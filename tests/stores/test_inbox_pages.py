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


_POPULATION = (
    # what the inbox is for: many runs and approvals, a few of them waiting
    "INSERT INTO sessions (id, created_at, owner) "
    "SELECT 's' || g, g, CASE WHEN g % 2 = 0 THEN 'alice' ELSE 'bob' END "
    "FROM generate_series(1, 4000) g",
    "INSERT INTO runs (id, session_id, status, started_at, data) "
    "SELECT 'r' || g, 's' || g, CASE WHEN g % 500 = 0 THEN 'awaiting_resolution' "
    "WHEN g % 500 = 1 THEN 'awaiting_approval' ELSE 'completed' END, g, '{}' "
    "FROM generate_series(1, 4000) g",
    "INSERT INTO approvals (id, session_id, run_id, call_id, status, requested_at, data) "
    "SELECT 'a' || g, 's' || g, 'r' || g, 'c', CASE WHEN g % 500 = 1 THEN 'pending' "
    "ELSE 'approved' END, g, '{}' FROM generate_series(1, 4000) g",
    "ANALYZE sessions, runs, approvals",
)


def test_postgres_reads_the_inbox_from_indexes(pg_url: str) -> None:
    empty_database(pg_url)
    asyncio.run(_prepared(pg_url))
    with psycopg.connect(pg_url, autocommit=True) as conn:
        # The plan is asked of tables holding what the inbox is for and analyzed, not of
        # whatever statistics earlier tests on this server left (the server is shared, and
        # on stale or empty statistics the planner may pick any index of runs).
        for statement in _POPULATION:
            conn.execute(statement)
        try:
            for index, sql, args in _queries("ord", "%s"):
                plan = " ".join(r[0] for r in conn.execute(f"EXPLAIN {sql}", args))
                # the other partial index of runs not ended reads only what has not ended
                # too (the few waiting runs found there, then sorted): either will do
                assert index in plan or (index == "runs_waiting" and "runs_live" in plan), plan
                assert "Seq Scan" not in plan, plan
                assert "runs_by_started" not in plan, plan  # never every run in start order
        finally:
            empty_database(pg_url)
            conn.execute("ANALYZE sessions, runs, approvals")  # as empty as they now are
