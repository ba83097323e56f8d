"""Branches read right whatever happens to the sessions they were forked from: the parent
grows, is compacted, is forked again, has raw history expired; forks of forks; reads in
windows across the fork points; recall sees only the branch's own history; ids stay
unique across the prefix a branch refers to. One suite for every store (SQLite and
PostgreSQL refer to the prefix; memory and JSONL copy it)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from plait.adapters.stores import Store
from plait.application._history import session_history
from plait.application.ports import Commit
from plait.domain.errors import ConflictError, MessageNotFoundError, ValidationError
from plait.domain.messages import Message, UserMessage
from tests.contract.base import ContractBase
from tests.contract.retention_contract import OLD, fork, history, seed, stones, summary_of


def said(mid: str, text: str) -> UserMessage:
    return UserMessage(id=mid, text=text, created_at=OLD + 100)


async def append(store: Store, session_id: str, *messages: Message) -> None:
    version = (await store.get_session(session_id)).version
    await store.commit(Commit(session_id=session_id, expected_version=version, messages=messages))


async def ids(store: Store, session_id: str, after: int = 0, limit: int | None = None) -> list[str]:
    return [sm.message.id for sm in await store.read_messages(session_id, after=after, limit=limit)]


async def family(store: Store) -> None:
    """s1: m1..m6 (summary through 4) then m7 m8 after the forks; b1 = s1[:4] + x1 x2;
    c1 = b1[:5] + y1 (a fork of a fork past b1's fork point); c2 = b1[:2] (before it)."""
    await seed(store)
    await fork(store, "s1", "b1", 4)
    await append(store, "s1", said("m7", "zebra parser notes"), said("m8", "parent only"))
    await append(store, "b1", said("x1", "branch zebra"), said("x2", "branch two"))
    await fork(store, "b1", "c1", 5)
    await fork(store, "b1", "c2", 2)
    await append(store, "c1", said("y1", "grandchild"))


class ForkChainContract(ContractBase):
    shares_bodies = True
    """False: the store copies the prefix (a tombstone in the parent is not the branch's)."""

    def test_branch_reads_resolve_the_chain(self) -> None:
        async def go(store: Store) -> None:
            await family(store)
            base = [m.id for m in history()]
            assert await ids(store, "s1") == [*base, "m7", "m8"]
            assert await ids(store, "b1") == [*base[:4], "x1", "x2"]
            assert await ids(store, "c1") == [*base[:4], "x1", "y1"]
            assert await ids(store, "c2") == base[:2]
            versions = {s: (await store.get_session(s)).version for s in ("s1", "b1", "c1", "c2")}
            assert versions == {"s1": 8, "b1": 6, "c1": 6, "c2": 2}
            # windows across the fork points
            assert await ids(store, "b1", after=3, limit=2) == ["m4", "x1"]
            assert await ids(store, "c1", after=1, limit=3) == ["m2", "m3", "m4"]
            assert await ids(store, "c1", after=4) == ["x1", "y1"]
            assert await ids(store, "c1", after=6) == []
            assert await ids(store, "b1", limit=0) == []
            seqs = [sm.seq for sm in await store.read_messages("c1")]
            assert seqs == [1, 2, 3, 4, 5, 6]
            # the same bodies as the parent's at each shared seq
            assert (await store.read_messages("c1"))[:4] == (await store.read_messages("s1"))[:4]

        self.run(go)

    def test_a_branch_history_for_a_run_is_its_chain_in_one_read(self) -> None:
        async def go(store: Store) -> None:
            await family(store)
            for sid in ("s1", "b1", "c1", "c2"):
                session, history = await session_history(store, sid)
                assert session == await store.get_session(sid)
                assert history == [sm.message for sm in await store.read_messages(sid)]
                assert len(history) == session.version

        self.run(go)

    def test_message_seq_sees_only_the_branch_history(self) -> None:
        async def go(store: Store) -> None:
            await family(store)
            assert await store.message_seq("b1", "m2") == 2
            assert await store.message_seq("b1", "x2") == 6
            assert await store.message_seq("b1", "m5") is None  # after the fork point
            assert await store.message_seq("b1", "m7") is None  # the parent grew after
            assert await store.message_seq("c1", "x1") == 5
            assert await store.message_seq("c1", "x2") is None
            assert await store.message_seq("c2", "m3") is None
            assert await store.message_seq("s1", "x1") is None

        self.run(go)

    def test_a_branch_appends_after_its_own_end(self) -> None:
        async def go(store: Store) -> None:
            await family(store)
            with pytest.raises(ConflictError):  # stale: b1 is at 6, not at its fork point
                await store.commit(
                    Commit(session_id="b1", expected_version=4, messages=(said("z", "late"),))
                )
            await fork(store, "s1", "e1", 8)
            assert (await store.get_session("e1")).version == 8
            await append(store, "e1", said("e9", "after all"))
            assert await ids(store, "e1", after=6) == ["m7", "m8", "e9"]

        self.run(go)

    def test_ids_are_unique_across_the_prefix_a_branch_refers_to(self) -> None:
        async def go(store: Store) -> None:
            await family(store)
            for sid, taken in (("b1", "m2"), ("c1", "x1"), ("c1", "m4"), ("c2", "m1")):
                with pytest.raises(ConflictError):
                    await append(store, sid, said(taken, "again"))
            # an id the parent used after the fork point is free in the branch
            await append(store, "b1", said("m7", "the branch's own m7"))
            assert await store.message_seq("b1", "m7") == 7
            (own,) = await store.read_messages("b1", after=6)
            assert own.message == said("m7", "the branch's own m7")

        self.run(go)

    def test_recall_searches_only_the_branch_history(self) -> None:
        async def go(store: Store) -> None:
            await family(store)
            found = [sm.message.id for sm in await store.search_history("s1", "zebra")]
            assert found == ["m7"]
            found = [sm.message.id for sm in await store.search_history("b1", "zebra")]
            assert found == ["x1"]
            assert [sm.message.id for sm in await store.search_history("c1", "zebra")] == ["x1"]
            assert await store.search_history("c2", "zebra") == []
            hits = await store.search_history("c1", "parser")  # m1, m3, m4 mention it
            assert [(sm.seq, sm.message.id) for sm in hits] == [(4, "m4"), (3, "m3"), (1, "m1")]
            hits = await store.search_history("c1", "parser", through_seq=2)
            assert [sm.message.id for sm in hits] == ["m1"]

        self.run(go)

    def test_compaction_of_the_parent_and_of_a_branch_are_separate(self) -> None:
        async def go(store: Store) -> None:
            await family(store)
            parent = history()
            s1 = [sm.message for sm in await store.read_messages("s1")]
            later = replace(summary_of("s1", 8, s1), id="sum-s1-8", generation=2)
            await store.activate_summary(later, expected_generation=1)
            assert await store.get_summary("b1") is None
            b1 = [sm.message for sm in await store.read_messages("b1")]
            own = summary_of("b1", 5, b1)
            await store.activate_summary(own, expected_generation=0)
            assert await store.get_summary("b1") == own
            assert await store.get_summary("c1") is None
            assert (await store.get_summary("s1")) == later
            with pytest.raises(ValidationError):  # c2 holds 2 messages: nothing covers 3
                await store.activate_summary(summary_of("c2", 3, parent), expected_generation=0)

        self.run(go)

    def test_expiring_the_parent_reaches_every_descendant_that_shares_it(self) -> None:
        async def go(store: Store) -> None:
            await family(store)
            await store.expire_messages("s1", stones(history()[:2]))
            parent = await store.read_messages("s1")
            for sid in ("b1", "c1", "c2"):
                branch = await store.read_messages(sid)
                if self.shares_bodies:
                    assert branch[:2] == parent[:2]
                    assert sorted(await store.expiries(sid)) == ["m1", "m2"]
                else:
                    assert [sm.message for sm in branch[:2]] == history()[:2]
            # recall no longer finds the expired text in any branch that shares it
            hits = [sm.message.id for sm in await store.search_history("c1", "parser")]
            assert hits == (["m4", "m3"] if self.shares_bodies else ["m4", "m3", "m1"])
            # expiring a branch's own message leaves the parent and siblings alone
            x1 = (await store.read_messages("b1", after=4, limit=1))[0].message
            assert await store.expire_messages("b1", stones([x1])) == ["x1"]
            assert "x1" not in await store.expiries("s1")
            c1_x1 = (await store.read_messages("c1", after=4, limit=1))[0].message
            assert (c1_x1 != x1) is self.shares_bodies  # the tombstone, where shared
            assert await store.message_seq("c1", "x1") == 5

        self.run(go)

    def test_a_branch_message_not_held_cannot_be_expired_through_it(self) -> None:
        async def go(store: Store) -> None:
            await family(store)
            m7 = (await store.read_messages("s1", after=6, limit=1))[0].message
            with pytest.raises(MessageNotFoundError):
                await store.expire_messages("b1", stones([m7]))
            assert await store.expiries("s1") == {}

        self.run(go)


async def copied_branch_reads_alike(store: Store) -> None:
    """A store holding "old", a branch of s1 at 4 with its own x1, made before forks
    referred to their prefix (a copied membership row per message): it reads, forks,
    appends, searches and expires alike, beside branches made now."""
    base = [m.id for m in history()]
    assert await ids(store, "old") == [*base[:4], "x1"]
    assert (await store.get_session("old")).version == 5
    assert await store.message_seq("old", "m3") == 3
    with pytest.raises(ConflictError):
        await append(store, "old", said("m2", "again"))
    # a new-style fork of the old-style branch, and of that one
    await fork(store, "old", "new", 5)
    await fork(store, "new", "newer", 2)
    assert await ids(store, "new") == [*base[:4], "x1"]
    assert await ids(store, "newer") == base[:2]
    await append(store, "new", said("n1", "fresh"))
    await append(store, "old", said("x2", "old grows"))
    assert await ids(store, "new", after=4) == ["x1", "n1"]
    assert await ids(store, "old", after=4) == ["x1", "x2"]
    with pytest.raises(ConflictError):
        await append(store, "new", said("x1", "taken in the prefix"))
    hits = [sm.message.id for sm in await store.search_history("new", "zebra")]
    assert hits == ["x1"]
    # retention in the parent reaches the copied rows and the new segments alike
    await store.expire_messages("s1", stones(history()[:1]))
    parent = await store.read_messages("s1", limit=1)
    for sid in ("old", "new", "newer"):
        assert await store.read_messages(sid, limit=1) == parent
        assert sorted(await store.expiries(sid)) == ["m1"]
