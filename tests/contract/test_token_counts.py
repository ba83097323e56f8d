"""Stored token counts (``TokenCountStore``) on the stores that keep them: SQLite and
PostgreSQL. Counts are kept by message body and meter: a branch sees the counts of the
prefix it shares, expiring (or restoring) a body drops its counts, ids a session does
not hold are ignored. (The memory and JSONL stores keep none: the assembler measures.)"""

from __future__ import annotations

import pytest

from plait.adapters.stores import Store
from plait.adapters.stores.postgres.store import PostgresStore
from plait.adapters.stores.sqlite.store import SqliteStore
from tests.contract.base import ContractBase
from tests.contract.retention_contract import fork, history, seed, stones
from tests.pg import empty_database

METER = "chars/4/4"


class TokenCountContract(ContractBase):
    def test_saved_counts_are_read_back_per_meter(self) -> None:
        async def go(store: Store) -> None:
            await seed(store, summarized=None)
            assert await store.read_token_counts("s1", METER) == {}  # type: ignore[attr-defined]
            await store.save_token_counts("s1", METER, {"m1": 7, "m2": 11})  # type: ignore[attr-defined]
            assert await store.read_token_counts("s1", METER) == {"m1": 7, "m2": 11}  # type: ignore[attr-defined]
            assert await store.read_token_counts("s1", "other") == {}  # type: ignore[attr-defined]
            await store.save_token_counts("s1", METER, {"m2": 12})  # type: ignore[attr-defined]
            assert await store.read_token_counts("s1", METER) == {"m1": 7, "m2": 12}  # type: ignore[attr-defined]

        self.run(go)

    def test_ids_not_held_are_ignored(self) -> None:
        async def go(store: Store) -> None:
            await seed(store, summarized=None)
            await seed(store, "s2", summarized=None)
            await store.save_token_counts("s1", METER, {"nope": 3, "m1": 5})  # type: ignore[attr-defined]
            assert await store.read_token_counts("s1", METER) == {"m1": 5}  # type: ignore[attr-defined]
            # s2 holds its own m1 body: s1's count is not its count
            assert await store.read_token_counts("s2", METER) == {}  # type: ignore[attr-defined]
            await store.save_token_counts("gone", METER, {"m1": 5})  # type: ignore[attr-defined]

        self.run(go)

    def test_a_branch_shares_the_counts_of_its_prefix_only(self) -> None:
        async def go(store: Store) -> None:
            await seed(store, summarized=None)
            counts = {m.id: k + 1 for k, m in enumerate(history())}
            await store.save_token_counts("s1", METER, counts)  # type: ignore[attr-defined]
            await fork(store, "s1", "b1", 3)
            assert await store.read_token_counts("b1", METER) == {  # type: ignore[attr-defined]
                "m1": 1, "m2": 2, "m3": 3,
            }  # fmt: skip
            await fork(store, "b1", "b2", 2)
            assert await store.read_token_counts("b2", METER) == {"m1": 1, "m2": 2}  # type: ignore[attr-defined]

        self.run(go)

    def test_expiring_a_body_drops_its_counts_in_every_branch(self) -> None:
        async def go(store: Store) -> None:
            await seed(store)
            messages = history()
            await store.save_token_counts("s1", METER, {m.id: 9 for m in messages})  # type: ignore[attr-defined]
            await fork(store, "s1", "b1", 4)
            await store.expire_messages("s1", stones(messages[:2]))
            left = {m.id: 9 for m in messages[2:]}
            assert await store.read_token_counts("s1", METER) == left  # type: ignore[attr-defined]
            assert await store.read_token_counts("b1", METER) == {"m3": 9, "m4": 9}  # type: ignore[attr-defined]
            await store.save_token_counts("s1", METER, {"m1": 2})  # type: ignore[attr-defined]
            await store.restore_messages("s1", messages[:1])
            assert "m1" not in await store.read_token_counts("s1", METER)  # type: ignore[attr-defined]

        self.run(go)

    def test_a_second_handle_reads_the_counts(self) -> None:
        async def go(a: Store, b: Store) -> None:
            await seed(a, summarized=None)
            await a.save_token_counts("s1", METER, {"m1": 4})  # type: ignore[attr-defined]
            assert await b.read_token_counts("s1", METER) == {"m1": 4}  # type: ignore[attr-defined]

        self.run2(go)


class TestSqliteTokenCounts(TokenCountContract):
    def create_store(self) -> Store:
        return SqliteStore.open(self.tmp_path / "db" / "plait.db")

    def second_handle(self) -> Store | None:
        return SqliteStore(self.tmp_path / "db" / "plait.db")


class TestPostgresTokenCounts(TokenCountContract):
    @pytest.fixture(autouse=True)
    def _pg(self, pg_url: str) -> None:
        self.pg_url = pg_url
        empty_database(pg_url)

    def create_store(self) -> Store:
        return PostgresStore(self.pg_url)

    def second_handle(self) -> Store | None:
        return PostgresStore(self.pg_url)
