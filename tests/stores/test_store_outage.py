"""Store outages (issue 20 item 2) at the store edge: a PostgreSQL server restarted with
``-m immediate`` or down, a SQLite disk that is full. Every such failure is
``store_unavailable`` (never a bare store error), the stores say they cannot commit while
it lasts, and the same store handle works again once the fault clears (stale pooled
connections are replaced, not handed out).

The PostgreSQL tests start a cluster of their own (they stop and restart it); the SQLite
disk is made full with ``PRAGMA max_page_count`` on the store's connection: SQLite then
fails a commit exactly as on a full disk (``SQLITE_FULL``, "database or disk is full").
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from plait.adapters.stores.postgres.store import PostgresStore
from plait.adapters.stores.sqlite.store import SqliteStore
from plait.domain.errors import StoreError, StoreUnavailableError
from plait.domain.session import Session
from plait.testing.postgres import Cluster
from tests.pg import own_cluster


@pytest.fixture(name="own_cluster")
def _own_cluster() -> Iterator[Cluster]:
    yield from own_cluster()


def session(n: int) -> Session:
    return Session(id=f"ses_{n}", created_at=float(n), owner="ana")


async def until_available(store: PostgresStore) -> None:
    """Retry as a worker does (the server may still be starting)."""
    async with asyncio.timeout(60):
        while True:
            try:
                await store.check_writable()
                return
            except StoreUnavailableError:
                await asyncio.sleep(0.2)


@pytest.mark.slow
def test_pg_restart_immediate_stale_pool_connections_are_replaced(own_cluster: Cluster) -> None:
    """Found: after ``pg_ctl restart -m immediate`` the API answered a burst of errors
    from pooled connections the restart had killed. Every call after the restart must
    get a live connection."""

    async def go() -> None:
        store = PostgresStore(own_cluster.url, max_size=6)
        try:
            await store.create_session(session(0))
            # Fill the pool: six calls at once each hold a connection.
            await asyncio.gather(*[store.get_session("ses_0") for _ in range(6)])
            own_cluster.restart("immediate")
            found = await asyncio.gather(*[store.get_session("ses_0") for _ in range(6)])
            assert {s.id for s in found} == {"ses_0"}
            await store.create_session(session(1))  # a write too
            await store.check_writable()
        finally:
            await store.close()

    asyncio.run(go())


@pytest.mark.slow
def test_pg_server_down_is_store_unavailable_then_the_store_recovers(
    own_cluster: Cluster,
) -> None:
    """While the server is down every call fails as ``store_unavailable`` (a transient
    outage, not a store error that would stop a worker) and readiness says so; once it
    is back the same store handle commits again."""

    async def go() -> None:
        store = PostgresStore(own_cluster.url, wait_seconds=2.0)
        try:
            await store.create_session(session(0))
            own_cluster.stop("immediate")
            with pytest.raises(StoreUnavailableError) as down:
                await store.create_session(session(1))
            assert down.value.code == "store_unavailable"
            with pytest.raises(StoreUnavailableError):
                await store.get_session("ses_0")
            with pytest.raises(StoreUnavailableError):
                await store.check_writable()
            own_cluster.start()
            await until_available(store)
            await store.create_session(session(1))
            assert (await store.get_session("ses_1")).id == "ses_1"
        finally:
            await store.close()

    asyncio.run(go())


@pytest.mark.slow
def test_pg_server_down_at_start_is_unavailable_but_a_refused_database_is_not(
    own_cluster: Cluster,
) -> None:
    """A server that does not answer yet is an outage to wait out (an API started before
    its database answers 503, a worker backs off); a server that refuses the database
    (or the user) is a configuration error, reported at once and not retried."""

    async def go() -> None:
        missing = PostgresStore(own_cluster.url.rsplit("/", 1)[0] + "/no_such_db")
        try:
            with pytest.raises(StoreError) as refused:
                await missing.get_session("ses_0")
            assert not isinstance(refused.value, StoreUnavailableError)
            assert "cannot open the PostgreSQL store" in str(refused.value)
        finally:
            await missing.close()
        own_cluster.stop("immediate")
        store = PostgresStore(own_cluster.url)
        try:
            with pytest.raises(StoreUnavailableError):
                await store.get_session("ses_0")
            own_cluster.start()
            await until_available(store)
        finally:
            await store.close()

    asyncio.run(go())


def test_sqlite_disk_full_is_store_unavailable_and_the_store_recovers(tmp_path: Path) -> None:
    """Found: on a full disk ``serve``'s worker stopped for good while ``/v1/ready``
    said ready. A commit that the full disk refused is ``store_unavailable``; the store
    says it cannot commit; once space is back (here: the cap lifted) it commits again
    with the same connection."""

    async def go() -> None:
        store = SqliteStore(tmp_path / "plait.db")
        try:
            await store.create_session(session(0))
            await store.check_writable()
            await cap_pages(store, extra=0)
            big = Session(id="ses_1", created_at=1.0, owner="ana", title="x" * 20_000)
            with pytest.raises(StoreUnavailableError) as full:
                await store.create_session(big)
            assert full.value.details["sqlite_error"] == "SQLITE_FULL"
            assert "database or disk is full" in full.value.message
            with pytest.raises(StoreUnavailableError):
                await store.check_writable()
            await cap_pages(store, extra=100_000)
            # The failure is remembered until a commit succeeds: readiness needs one.
            await store.create_session(big)
            await store.check_writable()
            assert (await store.get_session("ses_1")).title == "x" * 20_000
        finally:
            await store.close()

    asyncio.run(go())


async def cap_pages(store: SqliteStore, *, extra: int) -> None:
    """``PRAGMA max_page_count`` = the file's pages + ``extra`` on the store's own
    connection (the limit is per connection)."""

    def cap(conn: sqlite3.Connection) -> None:
        pages = conn.execute("PRAGMA page_count").fetchone()[0]
        conn.execute(f"PRAGMA max_page_count = {pages + extra}")

    await store._db.read(cap)
