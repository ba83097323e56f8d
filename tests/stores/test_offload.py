from __future__ import annotations

import asyncio
import threading

import pytest

from plait.adapters.stores.offload import Offloaded
from plait.adapters.stores.sqlite import SqliteStore
from tests.contract.builders import new_session


class Blocking:
    def __init__(self) -> None:
        self.threads: list[int] = []
        self.name = "plain attribute"

    async def work(self, x: int) -> int:
        self.threads.append(threading.get_ident())
        return x * 2

    async def suspends(self) -> None:
        await asyncio.sleep(0)


def test_calls_run_on_another_thread_and_return_their_value() -> None:
    inner = Blocking()
    store = Offloaded(inner)

    async def go() -> None:
        assert await store.work(21) == 42
        assert inner.threads and inner.threads[0] != threading.get_ident()
        assert store.name == "plain attribute"
        with pytest.raises(RuntimeError, match="suspended"):
            await store.suspends()

    asyncio.run(go())


def test_a_sqlite_store_works_offloaded(tmp_path: object) -> None:
    async def go() -> None:
        store = Offloaded(SqliteStore.open(f"{tmp_path}/plait.db"))
        await asyncio.gather(*[store.create_session(new_session(f"s{i}")) for i in range(20)])
        assert len(await store.list_sessions()) == 20
        await store.close()

    asyncio.run(go())
