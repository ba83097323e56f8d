"""The 作业一 acceptance table (seed section 十), row by row, on every store.

Histories are compared whole: two branches are independent only if each one's complete
persisted message list is exactly what it should be."""

from __future__ import annotations

import pickle
from typing import Any

import pytest

from plait.application.fork import ForkService
from plait.application.ports import Commit, ForkableStore
from plait.domain.errors import (
    ConflictError,
    InvalidCutPointError,
    MessageNotFoundError,
    SessionNotFoundError,
    ValidationError,
)
from plait.domain.session import ForkOrigin, Session
from tests.fork.conftest import Stores, append, forks_over, run, seed, stored, user


async def _sessions(store: ForkableStore) -> list[str]:
    return sorted(s.id for s in await store.list_sessions())


def test_fork_at_m3_holds_m1_to_m3_only(store: ForkableStore) -> None:
    async def go() -> None:
        history = await seed(store, workspace="/work/demo")
        forks = forks_over(store)
        result = await forks.fork_session("S", "m3", "req-1")
        branch = result.branch
        assert result.created
        assert branch == Session(
            id=branch.id,
            created_at=branch.created_at,
            owner=None,
            workspace="/work/demo",
            version=3,
            active_run_id=None,
            fork_origin=ForkOrigin(parent_session_id="S", fork_point_message_id="m3"),
        )
        assert await store.get_session(branch.id) == branch
        assert await store.read_messages(branch.id) == stored(history[:3])
        assert await store.read_messages("S") == stored(history)
        assert await store.list_runs(session_id=branch.id) == []
        record = await store.get_fork_record(branch.id)
        assert record == result.record
        assert (record.through_seq, record.source_version) == (3, 6)
        assert await store.get_fork_record("S") is None

    run(go())


def test_appends_stay_on_their_own_side(stores: Stores) -> None:
    async def go() -> None:
        store = stores.open()
        history = await seed(store)
        branch = (await forks_over(store).fork_session("S", "m3", "req-1")).branch
        in_branch = user("b4", "先检查测试环境")
        in_source = user("m7", "then upgrade")
        await append(store, branch.id, in_branch)
        await append(store, "S", in_source)
        expect_branch = stored([*history[:3], in_branch])
        expect_source = stored([*history, in_source])
        assert await store.read_messages(branch.id) == expect_branch
        assert await store.read_messages("S") == expect_source
        assert (await store.get_session(branch.id)).version == 4
        assert (await store.get_session("S")).version == 7
        if stores.kind == "memory":
            return
        await store.close()
        again = stores.open()  # what another process sees
        assert await again.read_messages(branch.id) == expect_branch
        assert await again.read_messages("S") == expect_source
        await again.close()

    run(go())


@pytest.mark.parametrize(
    ("through", "before", "after"),
    [("m2", "m1", "m3"), ("m4", "m3", "m5")],
)
def test_fork_inside_a_tool_unit_fails_and_creates_nothing(
    store: ForkableStore, through: str, before: str, after: str
) -> None:
    async def go() -> None:
        await seed(store)
        forks = forks_over(store)
        with pytest.raises(InvalidCutPointError) as e:
            await forks.fork_session("S", through, "req-1")
        err = e.value
        assert err.code == "invalid_cut_point"
        assert (err.details["before"], err.details["after"]) == (before, after)
        assert before in err.message and after in err.message
        assert pickle.loads(pickle.dumps(err)).details == err.details
        assert await _sessions(store) == ["S"]
        # The failed request id is still free: a valid fork under it succeeds.
        ok = await forks.fork_session("S", after, "req-1")
        assert (
            await store.read_messages(ok.branch.id)
            == (await store.read_messages("S"))[: int(after[1:])]
        )

    run(go())


def test_fork_at_an_open_call_at_the_end_names_no_point_after(store: ForkableStore) -> None:
    async def go() -> None:
        history = await seed(store)
        forks = forks_over(store)
        # Source ends with m4 (a call whose result is not saved yet): only a point before.
        await store.create_session(Session(id="T", created_at=1.0))
        await store.commit(Commit(session_id="T", expected_version=0, messages=tuple(history[:4])))
        with pytest.raises(InvalidCutPointError) as e:
            await forks.fork_session("T", "m4", "req-t")
        assert (e.value.details["before"], e.value.details["after"]) == ("m3", None)
        assert await _sessions(store) == ["S", "T"]

    run(go())


def test_unknown_message_or_bad_arguments_create_nothing(store: ForkableStore) -> None:
    async def go() -> None:
        await seed(store)
        forks = forks_over(store)
        with pytest.raises(MessageNotFoundError, match="plait history S"):
            await forks.fork_session("S", "m99", "req-1")
        with pytest.raises(ValidationError, match="request id"):
            await forks.fork_session("S", "m3", " ")
        with pytest.raises(SessionNotFoundError):
            await forks.fork_session("nope", "m3", "req-2")
        assert await _sessions(store) == ["S"]

    run(go())


@pytest.mark.slow
def test_repeated_request_returns_the_same_branch(store: ForkableStore) -> None:
    async def go() -> None:
        history = await seed(store)
        forks = forks_over(store)
        first = await forks.fork_session("S", "m3", "req-1")
        await append(store, first.branch.id, user("b4", "branch goes on"))
        again = await forks.fork_session("S", "m3", "req-1")
        assert not again.created
        assert again.branch.id == first.branch.id
        assert again.record == first.record
        assert await store.read_messages(first.branch.id) == stored(
            [*history[:3], user("b4", "branch goes on")]
        )
        assert await _sessions(store) == sorted(["S", first.branch.id])
        with pytest.raises(ConflictError, match="new request id") as e:
            await forks.fork_session("S", "m5", "req-1")
        assert e.value.details["branch_session_id"] == first.branch.id
        # The same request id from another caller is another request.
        other = await forks.fork_session("S", "m3", "req-1", caller="someone")
        assert other.created and other.branch.id != first.branch.id
        assert len(await _sessions(store)) == 3

    run(go())


class _AppendDuringFork:
    """A store whose fork commit is preceded by another writer's append to the source:
    the worst moment, after the fork fixed its prefix and before it commits."""

    def __init__(self, inner: ForkableStore) -> None:
        self._inner = inner
        self.appended = user("m7", "appended while the fork was running")

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def fork_session(self, commit: Any) -> Any:
        await append(self._inner, "S", self.appended)
        return await self._inner.fork_session(commit)


@pytest.mark.slow
def test_fork_during_a_concurrent_append_holds_the_fixed_prefix(store: ForkableStore) -> None:
    async def go() -> None:
        history = await seed(store)
        racing = _AppendDuringFork(store)
        forks = ForkService(store=racing, clock=forks_over(store).clock)
        result = await forks.fork_session("S", "m6", "req-1")
        assert result.record.source_version == 6
        assert await store.read_messages(result.branch.id) == stored(history)
        assert await store.read_messages("S") == stored([*history, racing.appended])
        assert (await store.get_session(result.branch.id)).version == 6

    run(go())


def test_caller_without_read_access_is_refused_and_learns_nothing(store: ForkableStore) -> None:
    async def go() -> None:
        await seed(store, owner="alice")
        forks = forks_over(store)
        with pytest.raises(SessionNotFoundError) as refused:
            await forks.fork_session("S", "m3", "req-1", caller="mallory")
        with pytest.raises(SessionNotFoundError) as missing:
            await forks.fork_session("X", "m3", "req-1", caller="mallory")
        # Same answer as for a session that does not exist (ids swapped), even for a
        # message id that would be invalid: nothing about the source leaks.
        with pytest.raises(SessionNotFoundError):
            await forks.fork_session("S", "m2", "req-2", caller="mallory")
        as_missing = missing.value.to_dict()
        assert refused.value.to_dict() == {
            "code": as_missing["code"],
            "message": as_missing["message"].replace("'X'", "'S'"),
            "details": {"session_id": "S"},
        }
        assert await _sessions(store) == ["S"]
        ok = await forks.fork_session("S", "m3", "req-1", caller="alice")
        assert ok.branch.owner == "alice"
        with pytest.raises(SessionNotFoundError):  # the branch is alice's too
            await forks.readable(ok.branch.id, "mallory")
        # A session without an owner (local use) is readable by anyone.
        await store.create_session(Session(id="L", created_at=1.0))
        assert (await forks.readable("L", "mallory")).id == "L"

    run(go())
