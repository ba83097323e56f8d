"""Helpers for tests on the session's PostgreSQL server (see ``pg_url`` in conftest)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator

import psycopg
import pytest

from plait.adapters.stores.postgres.store import PostgresStore
from plait.testing.postgres import Cluster, PostgresUnavailable, cluster

__all__ = ["empty_database", "own_cluster", "run_with"]

_migrated: set[str] = set()


def empty_database(url: str) -> None:
    """Migrate (once per server) and delete every row of plait's tables."""
    if url not in _migrated:

        async def migrate() -> None:
            store = PostgresStore(url)
            try:
                await store.upgrade()
            finally:
                await store.close()

        asyncio.run(migrate())
        _migrated.add(url)
    with psycopg.connect(url, autocommit=True) as conn:
        tables = [
            r[0]
            for r in conn.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname = current_schema() "
                "AND tablename <> 'plait_schema'"
            )
        ]
        if tables:
            conn.execute(f"TRUNCATE {', '.join(tables)} RESTART IDENTITY CASCADE")


def run_with(url: str, go: Callable[[PostgresStore], Awaitable[None]]) -> None:
    """``go`` with a store on ``url``, closed after it."""

    async def main() -> None:
        store = PostgresStore(url)
        try:
            await go(store)
        finally:
            await store.close()

    asyncio.run(main())


def own_cluster() -> Iterator[Cluster]:
    """A cluster for one test that stops or restarts it (never the session's server),
    durable (``fsync`` on: an immediate stop keeps what committed). Use in a fixture."""
    try:
        with cluster(fsync=True) as running:
            yield running
    except PostgresUnavailable as e:
        pytest.skip(f"no PostgreSQL server: {e}")
