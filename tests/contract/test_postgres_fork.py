"""Forks on PostgreSQL: the seed's example (section 七) through the fork service, with
shared bodies, appends staying on their own side, bad cut points creating nothing and
repeated requests returning the same branch, all in one event loop. (The whole fork
suite, tests/fork, runs on PostgreSQL too.)"""

from __future__ import annotations

import asyncio

import pytest

from plait.adapters.stores.postgres.store import PostgresStore
from plait.domain.errors import InvalidCutPointError, MessageNotFoundError
from plait.domain.session import ForkOrigin
from tests.fork.conftest import append, forks_over, seed, stored, user
from tests.pg import empty_database


def test_fork_on_postgres(pg_url: str) -> None:
    empty_database(pg_url)

    async def go() -> None:
        store = PostgresStore(pg_url)
        try:
            history = await seed(store, workspace="/work/demo")
            forks = forks_over(store)
            result = await forks.fork_session("S", "m3", "req-1")
            branch = result.branch
            assert result.created and branch.version == 3
            assert branch.fork_origin == ForkOrigin(
                parent_session_id="S", fork_point_message_id="m3"
            )
            assert await store.get_session(branch.id) == branch
            assert await store.read_messages(branch.id) == stored(history[:3])
            assert await store.get_fork_record(branch.id) == result.record
            assert await store.get_fork_record("S") is None

            again = await forks.fork_session("S", "m3", "req-1")
            assert not again.created and again.branch.id == branch.id

            await append(store, branch.id, user("b4", "branch only"))
            await append(store, "S", user("s7", "source only"))
            assert [m.message.id for m in await store.read_messages(branch.id)] == [
                "m1", "m2", "m3", "b4",
            ]  # fmt: skip
            assert (await store.read_messages("S"))[-1].message.id == "s7"

            before = {s.id for s in await store.list_sessions()}
            with pytest.raises(InvalidCutPointError):
                await forks.fork_session("S", "m4", "req-2")  # inside a tool unit
            with pytest.raises(MessageNotFoundError):
                await forks.fork_session("S", "nope", "req-3")
            assert {s.id for s in await store.list_sessions()} == before
            assert await store.message_seq("S", "m3") == 3
            assert await store.message_seq("S", "nope") is None
        finally:
            await store.close()

    asyncio.run(go())
