from __future__ import annotations

import pytest

from plait.adapters.stores import Store
from plait.adapters.stores.jsonl import JsonlStore
from plait.adapters.stores.memory import MemoryStore
from plait.adapters.stores.postgres import PostgresStore
from plait.adapters.stores.sqlite import SqliteStore
from tests.contract.retention_contract import RetentionContract
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
