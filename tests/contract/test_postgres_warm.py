"""A worker's reserved connections come ready for its statements (see
``plait.adapters.stores.postgres.warm``): run on each in a transaction rolled back, which
leaves nothing behind, not even on a queued run the warm-up's claim took."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import psycopg
import pytest

from plait.adapters.stores.postgres import store as store_module
from plait.adapters.stores.postgres.store import PostgresStore
from plait.application.ports import Commit
from plait.domain.runs import RunStatus
from tests.contract.builders import new_run, new_session, user
from tests.pg import empty_database

_TABLES = ("sessions", "runs", "messages", "session_messages", "run_events", "executions")


def _rows(url: str) -> dict[str, int]:
    with psycopg.connect(url, autocommit=True) as conn:
        out = {}
        for table in _TABLES:
            row = conn.execute(f"SELECT count(*) FROM {table}").fetchone()
            assert row is not None
            out[table] = int(row[0])
        return out


async def _queue(store: PostgresStore, started_at: float) -> None:
    """Session s1 with a queued run r1 that began at ``started_at``."""
    await store.create_session(new_session())
    run = new_run(status=RunStatus.QUEUED, started_at=started_at)
    await store.start_run(
        Commit(session_id="s1", expected_version=None, messages=(user("m1"),), run=run)
    )


async def _compiled(store: PostgresStore, count: int) -> list[dict[str, int]]:
    """Per pooled connection (``count`` of them, each a different one): the PL/pgSQL
    functions its backend has compiled, each with the statements it has a plan cached
    for (the backend's own memory contexts)."""
    pool = await store._pool()
    held = [await pool.getconn() for _ in range(count)]
    try:
        out = []
        for conn in held:
            cur = await conn.execute(
                "SELECT name, ident FROM pg_backend_memory_contexts "
                "WHERE name IN ('PL/pgSQL function', 'CachedPlan')"
            )
            rows = await cur.fetchall()
            functions = [str(r[1]).split("(")[0] for r in rows if r[0] == "PL/pgSQL function"]
            plans = sum(1 for r in rows if r[0] == "CachedPlan")
            out.append({name: plans for name in functions})
        return out
    finally:
        for conn in held:
            await pool.putconn(conn)


def test_reserved_connections_come_ready_for_a_workers_statements(
    pg_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Each reserved connection's backend has compiled the claim's and a step commit's
    functions and holds plans for their statements before any run uses it; every
    statement of the warm-up succeeded (none was refused)."""
    empty_database(pg_url)
    caplog.set_level(logging.WARNING, logger="plait.store")

    async def go() -> list[dict[str, int]]:
        store = PostgresStore(pg_url)
        try:
            await store.reserve_connections(3)
            return await _compiled(store, 3)
        finally:
            await store.close()

    for compiled in asyncio.run(go()):
        assert "plait_claim" in compiled, compiled
        assert "plait_commit_events" in compiled, compiled
        assert "plait_commit" in compiled, compiled  # the submission's
        assert next(iter(compiled.values())) >= 20  # the functions' statements, planned
    assert "not made ready" not in caplog.text


async def _reserve_beside_a_queued_run(url: str, *, started_at: float, count: int) -> None:
    """Reserve ``count`` connections while run r1 (begun at ``started_at``) is queued: no
    row is left, r1 is as it was, and a claim then takes it with the next token."""
    store = PostgresStore(url)
    try:
        await _queue(store, started_at=started_at)
        before = _rows(url)
        queued = await store.get_run("r1")
        await store.reserve_connections(count)
        assert _rows(url) == before
        after = await store.get_run("r1")
        assert after == queued
        assert after.status is RunStatus.QUEUED and after.lease is None
        claimed = await store.claim_and_start_run(
            owner="w1", now=2_000.0, expires_at=2_060.0, model="m", model_spec=None
        )
        assert claimed is not None and claimed.run.id == "r1"
        assert claimed.run.lease_token == queued.lease_token + 1
    finally:
        await store.close()


def test_warming_up_leaves_the_store_as_it_was(pg_url: str) -> None:
    """No row written by the warm-up remains, and a run queued before it is still
    queued, unclaimed, its token unchanged; a claim then takes it."""
    empty_database(pg_url)
    asyncio.run(_reserve_beside_a_queued_run(pg_url, started_at=1_001.0, count=4))


def test_a_queued_run_the_warm_ups_claim_takes_is_left_as_it_was(pg_url: str) -> None:
    """A queued run older than the warm-up's scratch run is the one its claim takes: the
    warm-up stops there, and the rollback leaves that run queued and unclaimed."""
    empty_database(pg_url)
    # begun before the scratch run's start, so the warm-up's claim takes it
    asyncio.run(_reserve_beside_a_queued_run(pg_url, started_at=-100.0, count=2))


def test_a_connection_that_cannot_be_made_ready_is_reserved_all_the_same(
    pg_url: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A warm-up that fails is logged; the connections stay open and the store serves."""
    empty_database(pg_url)

    async def failing(conn: Any) -> None:
        raise psycopg.errors.QueryCanceled("canceling statement due to statement timeout")

    monkeypatch.setattr(store_module, "warm", failing)

    async def go() -> None:
        store = PostgresStore(pg_url)
        try:
            await store.create_session(new_session())
            await store.reserve_connections(3)
            assert (await store.get_session("s1")).id == "s1"
            pool = await store._pool()
            assert pool.get_stats()["pool_size"] == 3
        finally:
            await store.close()

    with caplog.at_level(logging.WARNING, logger="plait.store"):
        asyncio.run(go())
    refused = [r.getMessage() for r in caplog.records if "not made ready" in r.getMessage()]
    assert len(refused) == 1, caplog.text  # once for all of them
    assert refused[0].startswith("3 of 3 reserved connections were not made ready")
    assert "statement timeout" in refused[0]
