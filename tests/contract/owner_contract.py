"""Ownership and paging of session listings, on every store: one owner's pages hold
exactly that owner's sessions newest first, whichever handle (process) created them,
branches included (a branch belongs to whoever forked it), and a page cursor continues
in the overall order whoever owns it."""

from __future__ import annotations

from plait.adapters.stores import Store
from plait.application.fork import ForkService
from plait.application.ports import Commit
from plait.domain.session import Session
from plait.testing import FixedClock
from tests.contract.base import ContractBase
from tests.contract.builders import new_session, user


async def _pages(store: Store, owner: str | None, size: int) -> list[str]:
    got: list[str] = []
    before = None
    while True:
        page = await store.list_sessions(owner=owner, before=before, limit=size)
        got += [s.id for s in page]
        if len(page) < size:
            return got
        before = page[-1].id


class OwnerPagesContract(ContractBase):
    def test_owner_pages_across_handles_and_forks(self) -> None:
        async def go(a: Store) -> None:
            b = self.second_handle()
            try:
                await _scenario(a, b or a)
            finally:
                if b is not None:
                    await b.close()

        self.run(go)


async def _scenario(a: Store, b: Store) -> None:
    made: list[Session] = []
    for i in range(24):  # three owners (one of them nobody), two handles, equal times in fours
        s = new_session(f"s{i:02d}", created_at=100.0 + i // 4, owner=("alice", "bob", None)[i % 3])
        await (a if i % 2 else b).create_session(s)
        made.append(s)
    await b.commit(Commit(session_id="s00", expected_version=0, messages=(user("m1"),)))
    forks = ForkService(store=b, clock=FixedClock(150.0))
    branch = (await forks.fork_session("s00", "m1", "req-1", "alice")).branch
    made.append(branch)
    newest = sorted(made[::-1], key=lambda s: s.created_at, reverse=True)  # ties: newest first
    assert newest[0] == branch and branch.owner == "alice"
    for who in ("alice", "bob"):
        want = [s.id for s in newest if s.owner == who]
        assert await _pages(a, who, 4) == want
        assert await _pages(b, who, 3) == want
    assert [s.id for s in await a.list_sessions()] == [s.id for s in newest]
    # a cursor that is somebody else's session: alice's sessions older than it
    cursor = next(s for s in newest if s.owner == "bob")
    older = newest[newest.index(cursor) + 1 :]
    page = await a.list_sessions(owner="alice", before=cursor.id, limit=100)
    assert [s.id for s in page] == [s.id for s in older if s.owner == "alice"]
    assert await a.list_sessions(owner="alice", limit=0) == []
    # listings show sessions as they are now
    (first,) = await a.list_sessions(owner="alice", before=newest[1].id, limit=1)
    assert first == await a.get_session(first.id)
    (s00,) = [s for s in await b.list_sessions(owner="alice", limit=100) if s.id == "s00"]
    assert s00.version == 1
