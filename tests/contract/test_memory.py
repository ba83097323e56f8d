from __future__ import annotations

from plait.adapters.stores import Store
from plait.adapters.stores.memory.store import MemoryStore
from tests.contract.approval_contract import InboxContract
from tests.contract.store_contract import StoreContract


class TestMemoryStore(StoreContract, InboxContract):
    def create_store(self) -> Store:
        return MemoryStore()
