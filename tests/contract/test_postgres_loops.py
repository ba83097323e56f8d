"""A PostgresStore opened in one event loop and used in another: each ``asyncio.run``
(a CLI command, a test, a thread of its own) gets working connections; a loop that is
still open elsewhere is refused with a clear error instead of a hang."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import psycopg
import pytest

from plait.adapters.stores.postgres.store import PostgresStore
from plait.domain.errors import ConfigError
from tests.contract.builders import new_session
from tests.pg import empty_database


@pytest.mark.slow
def test_one_store_across_successive_event_loops(pg_url: str) -> None:
    empty_database(pg_url)
    store = PostgresStore(pg_url)
    asyncio.run(store.create_session(new_session()))
    # The first loop is closed now; the next one opens its own connections.
    assert asyncio.run(store.get_session("s1")).id == "s1"
    assert [s.id for s in asyncio.run(store.list_sessions())] == ["s1"]

    def elsewhere() -> None:
        assert asyncio.run(store.get_session("s1")).id == "s1"

    t = threading.Thread(target=elsewhere)
    t.start()
    t.join()
    asyncio.run(store.close())
    with pytest.raises(ConfigError, match="store is closed"):
        asyncio.run(store.get_session("s1"))


def test_a_loop_still_open_elsewhere_is_refused_clearly(pg_url: str) -> None:
    empty_database(pg_url)
    store = PostgresStore(pg_url)
    first = asyncio.new_event_loop()
    try:
        first.run_until_complete(store.create_session(new_session()))
        with pytest.raises(ConfigError) as info:
            asyncio.run(store.get_session("s1"))
        assert "another event loop that is still open" in info.value.message
        # The loop it belongs to keeps working.
        assert first.run_until_complete(store.get_session("s1")).id == "s1"
        first.run_until_complete(store.close())
    finally:
        first.close()


def test_closing_from_another_loop_releases_the_connections(pg_url: str) -> None:
    empty_database(pg_url)
    store = PostgresStore(pg_url)
    asyncio.run(store.create_session(new_session()))
    with psycopg.connect(pg_url, autocommit=True) as conn:
        assert _backends(conn) >= 1  # the pool's connection, left by its dead loop
        asyncio.run(store.close())  # the pool's loop is gone: its connections are dropped
        deadline = time.monotonic() + 10
        while _backends(conn) != 0:  # the server notices the closed sockets
            assert time.monotonic() < deadline
            time.sleep(0.05)
    with pytest.raises(ConfigError, match="store is closed"):
        asyncio.run(store.get_session("s1"))


def _backends(conn: psycopg.Connection[Any]) -> int:
    """Client connections to this database other than ``conn``."""
    row = conn.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
        "AND pid <> pg_backend_pid() AND backend_type = 'client backend'"
    ).fetchone()
    assert row is not None
    return int(row[0])


def test_reserved_connections_are_open_at_once_and_stay_open(pg_url: str) -> None:
    """A worker reserves its connections before its first claim: they are open when
    ``reserve_connections`` returns, the pool keeps them, and the store's maximum caps
    them (8 by default)."""
    empty_database(pg_url)

    async def go(conn: psycopg.Connection[Any]) -> None:
        store = PostgresStore(pg_url)
        try:
            await store.create_session(new_session())
            assert _backends(conn) == 1  # the pool's first
            await store.reserve_connections(4)
            assert _backends(conn) == 4
            await store.get_session("s1")
            await asyncio.sleep(0.2)
            assert _backends(conn) == 4  # kept: the pool's minimum is 4 now
            await store.reserve_connections(2)  # fewer than it has: nothing closes
            await store.reserve_connections(100)
            assert _backends(conn) == 8
        finally:
            await store.close()

    with psycopg.connect(pg_url, autocommit=True) as conn:
        asyncio.run(go(conn))
