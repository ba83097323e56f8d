from __future__ import annotations

from plait.adapters.stores import Store
from plait.adapters.stores.jsonl.store import JsonlStore
from plait.adapters.stores.memory.store import MemoryStore
from plait.adapters.stores.sqlite.store import SqliteStore
from tests.contract.summary_contract import SummaryContract


class TestMemorySummaries(SummaryContract):
    def create_store(self) -> Store:
        return MemoryStore()


class TestSqliteSummaries(SummaryContract):
    def create_store(self) -> Store:
        return SqliteStore.open(self.tmp_path / "db" / "plait.db")

    def second_handle(self) -> Store | None:
        return SqliteStore(self.tmp_path / "db" / "plait.db")


class TestJsonlSummaries(SummaryContract):
    def create_store(self) -> Store:
        return JsonlStore(self.tmp_path / "store")

    def second_handle(self) -> Store | None:
        return JsonlStore(self.tmp_path / "store")
