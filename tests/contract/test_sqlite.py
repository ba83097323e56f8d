from __future__ import annotations

from plait.adapters.stores import Store
from plait.adapters.stores.sqlite.store import SqliteStore
from tests.contract.approval_contract import InboxContract
from tests.contract.store_contract import StoreContract


class TestSqliteStore(StoreContract, InboxContract):
    def create_store(self) -> Store:
        return SqliteStore.open(self.tmp_path / "db" / "plait.db")

    def second_handle(self) -> Store | None:
        return SqliteStore(self.tmp_path / "db" / "plait.db")


class TestSqliteStoreInline(StoreContract, InboxContract):
    """The same store as a process driving one run opens it: every call inline, on the
    loop's thread (issue 27 item 1); another process's handle uses the I/O thread."""

    def create_store(self) -> Store:
        return SqliteStore.open(self.tmp_path / "db" / "plait.db", io="inline")

    def second_handle(self) -> Store | None:
        return SqliteStore(self.tmp_path / "db" / "plait.db")
