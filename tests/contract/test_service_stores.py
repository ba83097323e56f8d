from __future__ import annotations

import pytest

from plait.adapters.stores import Store
from plait.adapters.stores.memory.store import MemoryStore
from plait.adapters.stores.postgres.store import PostgresStore
from plait.adapters.stores.sqlite.store import SqliteStore
from tests.contract.service_contract import ServiceContract
from tests.pg import empty_database


class TestMemoryService(ServiceContract):
    def create_store(self) -> Store:
        return MemoryStore()


class TestSqliteService(ServiceContract):
    def create_store(self) -> Store:
        return SqliteStore.open(self.tmp_path / "db" / "plait.db")

    def second_handle(self) -> Store | None:
        return SqliteStore(self.tmp_path / "db" / "plait.db")


class TestPostgresService(ServiceContract):
    @pytest.fixture(autouse=True)
    def _pg(self, pg_url: str) -> None:
        self.pg_url = pg_url
        empty_database(pg_url)

    def create_store(self) -> Store:
        return PostgresStore(self.pg_url)

    def second_handle(self) -> Store | None:
        return PostgresStore(self.pg_url)
