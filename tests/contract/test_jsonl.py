from __future__ import annotations

from plait.adapters.stores import Store
from plait.adapters.stores.jsonl.store import JsonlStore
from tests.contract.store_contract import StoreContract


class TestJsonlStore(StoreContract):
    def create_store(self) -> Store:
        return JsonlStore(self.tmp_path / "store")

    def second_handle(self) -> Store | None:
        return JsonlStore(self.tmp_path / "store")
