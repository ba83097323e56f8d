"""The fork chain suite on every store."""

from __future__ import annotations

import pytest

from plait.adapters.stores import Store
from plait.adapters.stores.jsonl.store import JsonlStore
from plait.adapters.stores.memory.store import MemoryStore
from plait.adapters.stores.postgres.store import PostgresStore
from plait.adapters.stores.sqlite.store import SqliteStore
from tests.contract.fork_chain_contract import ForkChainContract
from tests.pg import empty_database


class TestMemoryForkChain(ForkChainContract):
    def create_store(self) -> Store:
        return MemoryStore()


class TestSqliteForkChain(ForkChainContract):
    def create_store(self) -> Store:
        return SqliteStore.open(self.tmp_path / "db" / "plait.db")


class TestJsonlForkChain(ForkChainContract):
    shares_bodies = False

    def create_store(self) -> Store:
        return JsonlStore(self.tmp_path / "store")


class TestPostgresForkChain(ForkChainContract):
    @pytest.fixture(autouse=True)
    def _pg(self, pg_url: str) -> None:
        self.pg_url = pg_url
        empty_database(pg_url)

    def create_store(self) -> Store:
        return PostgresStore(self.pg_url)
