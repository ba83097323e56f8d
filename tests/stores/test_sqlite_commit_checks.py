"""A run's commits on SQLite are checked against the session's version and the run's row
(lease, fencing token, status, cancel flag). This store keeps what its own last commit
left there and skips reading it again only while that is certain: its connection wrote
nothing else since and no other connection committed (``PRAGMA data_version``). Every
other write, here or elsewhere, is seen by the next commit."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import replace
from pathlib import Path

import pytest

from plait.adapters.stores.sqlite.store import SqliteStore
from plait.application.ports import Commit
from plait.domain.errors import ConflictError, LeaseLostError
from plait.domain.runs import RunStatus, RunUsage
from tests.contract.base import started
from tests.contract.builders import lease, new_run, user
from tests.contract.retention_contract import fork, seed

OWNER = "worker-a"


def step(version: int, n: int) -> Commit:
    """The n-th step of run r1 (leased to OWNER, token 0): its usage and one message."""
    run = new_run(lease=lease(OWNER), usage=RunUsage(steps=n))
    return Commit(
        session_id="s1",
        expected_version=version,
        run=run,
        messages=(user(f"m{n}"),),
        lease_owner=OWNER,
        lease_token=0,
    )


def checked_reads(store: SqliteStore) -> list[str]:
    """The reads of the checked row (session version and run) the store's commits make."""
    seen: list[str] = []
    conn = store._db._conn
    assert conn is not None
    conn.set_trace_callback(lambda sql: seen.append(sql) if "LEFT JOIN runs" in sql else None)
    return seen


def run_two(test: Callable[[SqliteStore, SqliteStore], Awaitable[None]], path: Path) -> None:
    path.mkdir(parents=True, exist_ok=True)

    async def go() -> None:
        mine = SqliteStore(path / "s.db", io="inline")
        other = SqliteStore(path / "s.db", io="inline")
        try:
            await started(mine, owner=OWNER)
            await test(mine, other)
        finally:
            await mine.close()
            await other.close()

    asyncio.run(go())


def test_consecutive_commits_of_a_run_read_the_checked_row_once(tmp_path: Path) -> None:
    async def go(mine: SqliteStore, other: SqliteStore) -> None:
        reads = checked_reads(mine)
        for n in range(1, 4):
            result = await mine.commit(step(n - 1, n))
            assert result.version == n and not result.cancel_requested
        assert reads == []  # start_run left it, and nothing else wrote since
        run = await mine.get_run("r1")
        assert run.usage.steps == 3 and run.lease == lease(OWNER)

    run_two(go, tmp_path)


def test_another_connection_taking_the_run_over_fences_the_next_commit(tmp_path: Path) -> None:
    async def go(mine: SqliteStore, other: SqliteStore) -> None:
        await mine.commit(step(0, 1))
        claimed = await other.claim_run("r1", owner="b", now=2_001.0, expires_at=2_100.0)
        assert claimed.lease_token == 1
        with pytest.raises(LeaseLostError):
            await mine.commit(step(1, 2))
        with pytest.raises(LeaseLostError):  # and a write without the run's state too
            await mine.commit(replace(step(1, 2), run=None, lease_run_id="r1"))
        assert [m.seq for m in await other.read_messages("s1")] == [1]

    run_two(go, tmp_path)


def test_another_connection_appending_makes_the_next_commit_a_conflict(tmp_path: Path) -> None:
    async def go(mine: SqliteStore, other: SqliteStore) -> None:
        await mine.commit(step(0, 1))
        await other.commit(Commit(session_id="s1", expected_version=1, messages=(user("x"),)))
        with pytest.raises(ConflictError):
            await mine.commit(step(1, 2))
        assert (await mine.commit(step(2, 2))).version == 3

    run_two(go, tmp_path)


def test_a_cancel_requested_elsewhere_or_here_is_seen_by_the_next_commit(tmp_path: Path) -> None:
    async def go(mine: SqliteStore, other: SqliteStore) -> None:
        await mine.commit(step(0, 1))
        await other.request_cancel("r1")
        assert (await mine.commit(step(1, 2))).cancel_requested

    async def here(mine: SqliteStore, other: SqliteStore) -> None:
        await mine.commit(step(0, 1))
        await mine.request_cancel("r1")  # this connection, but not a commit
        assert (await mine.commit(step(1, 2))).cancel_requested

    run_two(go, tmp_path / "a")
    run_two(here, tmp_path / "b")


def test_a_refused_commit_leaves_nothing_to_trust(tmp_path: Path) -> None:
    async def go(mine: SqliteStore, other: SqliteStore) -> None:
        await mine.commit(step(0, 1))
        with pytest.raises(ConflictError):
            await mine.commit(step(5, 2))  # a wrong version: refused, rolled back
        reads = checked_reads(mine)
        assert (await mine.commit(step(1, 2))).version == 2
        assert len(reads) == 1  # read again after the refusal
        await mine.renew_lease("r1", owner=OWNER, expires_at=2_050.0)
        assert (await mine.commit(step(2, 3))).version == 3
        assert len(reads) == 2  # and after the lease renewal
        assert (await mine.get_run("r1")).lease == lease(OWNER, 2_050.0)

    run_two(go, tmp_path)


def test_each_kind_of_run_update_is_stored(tmp_path: Path) -> None:
    """A step's update (lease, usage), a new status, a new start time: each is written by
    the statement that sets only what can change, and read back whole."""

    async def go(mine: SqliteStore, other: SqliteStore) -> None:
        await mine.commit(step(0, 1))
        later = new_run(lease=lease(OWNER), usage=RunUsage(steps=2), started_at=1_500.0)
        await mine.commit(replace(step(1, 2), run=later))
        assert await other.get_run("r1") == later
        assert [r.id for r in await other.list_runs(session_id="s1")] == ["r1"]
        done = later.ended(RunStatus.COMPLETED, 1_600.0)
        await mine.commit(replace(step(2, 3), run=done))
        assert await other.get_run("r1") == done
        assert (await other.get_session("s1")).active_run_id is None

    run_two(go, tmp_path)


def test_a_run_started_on_a_branch_cannot_reuse_an_id_of_its_prefix(tmp_path: Path) -> None:
    """A run's start is checked from the session's row alone; a branch's first message
    is still checked against the prefix it refers to."""

    async def go() -> None:
        store = SqliteStore(tmp_path / "s.db", io="inline")
        await seed(store, summarized=None)
        await fork(store, "s1", "b1", 4)
        run = new_run("rb", session_id="b1")
        taken = Commit(session_id="b1", expected_version=4, run=run, messages=(user("m2"),))
        with pytest.raises(ConflictError, match="already stored"):
            await store.start_run(taken)
        assert await store.list_runs(session_id="b1") == []
        fresh = replace(taken, messages=(user("b-new"),))
        assert (await store.start_run(fresh)).version == 5
        again = Commit(
            session_id="b1", expected_version=5, messages=(user("m3"),), lease_run_id="rb"
        )
        with pytest.raises(ConflictError, match="already stored"):  # the run's next commit
            await store.commit(again)
        assert [sm.seq for sm in await store.read_messages("b1")] == [1, 2, 3, 4, 5]
        await store.close()

    asyncio.run(go())
