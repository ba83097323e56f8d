from __future__ import annotations

import asyncio

import pytest

from plait.adapters.stores import Store
from plait.adapters.stores.postgres import PostgresStore
from tests.contract.store_contract import StoreContract
from tests.pg import empty_database


class TestPostgresStore(StoreContract):
    @pytest.fixture(autouse=True)
    def _pg(self, pg_url: str) -> None:
        self.pg_url = pg_url
        empty_database(pg_url)

    def create_store(self) -> Store:
        return PostgresStore(self.pg_url)

    def second_handle(self) -> Store | None:
        return PostgresStore(self.pg_url)


def test_upgrade_is_idempotent(pg_url: str) -> None:
    async def go() -> tuple[int, int]:
        store = PostgresStore(pg_url)
        try:
            return await store.upgrade()
        finally:
            await store.close()

    before, after = asyncio.run(go())
    assert before == after
