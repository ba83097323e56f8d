"""PostgreSQL forks that do not copy: a fork writes no membership row per message, and
branches made before (a copied membership row per message, as migration 15 finds them)
read, fork, append, search and expire alike beside branches made after."""

from __future__ import annotations

import psycopg
import pytest

from plait.adapters.stores.postgres.store import PostgresStore
from tests.contract.fork_chain_contract import append, copied_branch_reads_alike, said
from tests.contract.retention_contract import fork, seed
from tests.pg import empty_database, run_with


@pytest.fixture
def url(pg_url: str) -> str:
    empty_database(pg_url)
    return pg_url


def _rows(url: str, sql: str, *args: object) -> list[tuple[object, ...]]:
    with psycopg.connect(url, autocommit=True) as conn:
        return list(conn.execute(sql, args).fetchall())


@pytest.mark.slow
def test_a_fork_copies_no_membership_rows(url: str) -> None:
    async def go(store: PostgresStore) -> None:
        await seed(store)
        await fork(store, "s1", "b1", 5)
        await fork(store, "b1", "c1", 3)
        await append(store, "b1", said("x1", "own"))

    run_with(url, go)
    members = "SELECT count(*) FROM session_messages WHERE session_id = %s"
    assert _rows(url, members, "b1") == [(1,)]
    assert _rows(url, members, "c1") == [(0,)]
    segments = "SELECT owner_id, lo, hi FROM session_segments WHERE session_id = %s ORDER BY lo"
    assert _rows(url, segments, "c1")[0] == ("s1", 1, 3)


@pytest.mark.slow
def test_branches_with_copied_rows_read_alike(url: str) -> None:
    async def make(store: PostgresStore) -> None:
        await seed(store)
        await fork(store, "s1", "old", 4)
        await append(store, "old", said("x1", "branch zebra"))

    run_with(url, make)
    with psycopg.connect(url, autocommit=True) as conn:  # as forks stored branches before
        conn.execute("DELETE FROM session_segments WHERE session_id = 'old'")
        conn.execute(
            "INSERT INTO session_messages (session_id, seq, message_id, message_pk) "
            "SELECT 'old', seq, message_id, message_pk FROM session_messages "
            "WHERE session_id = 's1' AND seq <= 4"
        )

    run_with(url, copied_branch_reads_alike)
