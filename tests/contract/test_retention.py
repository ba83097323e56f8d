from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from plait.adapters.stores import Store
from plait.adapters.stores.jsonl.store import JsonlStore
from plait.adapters.stores.memory.store import MemoryStore
from plait.adapters.stores.postgres.store import PostgresStore
from plait.adapters.stores.sqlite.store import SqliteStore
from plait.application.ports import Commit
from plait.domain.messages import UserMessage
from tests.contract.retention_contract import RetentionContract, history, seed, stones
from tests.pg import empty_database


class TestMemoryRetention(RetentionContract):
    def create_store(self) -> Store:
        return MemoryStore()


class TestSqliteRetention(RetentionContract):
    def create_store(self) -> Store:
        return SqliteStore.open(self.tmp_path / "db" / "plait.db")

    def second_handle(self) -> Store | None:
        return SqliteStore(self.tmp_path / "db" / "plait.db")


class TestJsonlRetention(RetentionContract):
    shares_bodies = False

    def create_store(self) -> Store:
        return JsonlStore(self.tmp_path / "store")

    def second_handle(self) -> Store | None:
        return JsonlStore(self.tmp_path / "store")


class TestPostgresRetention(RetentionContract):
    @pytest.fixture(autouse=True)
    def _pg(self, pg_url: str) -> None:
        self.pg_url = pg_url
        empty_database(pg_url)

    def create_store(self) -> Store:
        return PostgresStore(self.pg_url)

    def second_handle(self) -> Store | None:
        return PostgresStore(self.pg_url)


def test_sqlite_keeps_no_copy_of_expired_content(tmp_path: Path) -> None:
    """The old text is overwritten, not left in free pages or in the recall index."""
    path = tmp_path / "db" / "plait.db"

    long = UserMessage(id="m7", text="zebra-secret " * 2_000, created_at=1.0)  # overflow pages

    async def go() -> None:
        store = SqliteStore.open(path)
        try:
            await seed(store)
            await store.commit(Commit(session_id="s1", expected_version=6, messages=(long,)))
            assert await store.search_history("s1", "failing parser")  # indexes the bodies
            await store.expire_messages("s1", stones([history()[0], long]))
        finally:
            await store.close()  # the last connection checkpoints the WAL into the file

    asyncio.run(go())
    data = b"".join(p.read_bytes() for p in path.parent.iterdir())
    assert b"failing parser" not in data and b"zebra-secret" not in data
    assert b"FAILED tests/t.py::test_parser" in data  # m3 was not expired
