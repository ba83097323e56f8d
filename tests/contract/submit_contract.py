"""The contract of a one-statement submission (part of :class:`StoreContract`): a run
start with ``expected_version=None`` appends after the session's last message, and a
commit with ``session_owner`` refuses someone else's session as if it did not exist,
before any other check, writing nothing."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import pytest

from plait.adapters.stores import Store
from plait.application.ports import Commit, CommitResult
from plait.domain.errors import ConfigError, SessionBusyError, SessionNotFoundError
from plait.domain.runs import RunStatus
from plait.domain.session import Session, StoredMessage
from tests.contract.base import ContractBase, stored
from tests.contract.builders import assistant, new_run, new_session, user


def _submit(run_id: str, message_id: str, owner: str | None = None, sid: str = "s1") -> Commit:
    run = new_run(run_id, session_id=sid, status=RunStatus.QUEUED)
    return Commit(
        session_id=sid, expected_version=None, run=run,
        messages=(user(message_id, run_id=run_id),), session_owner=owner,
    )  # fmt: skip


async def _finish(store: Store, run_id: str, version: int, *extra: str) -> CommitResult:
    """End ``run_id`` (completed), appending assistant messages ``extra``."""
    run = new_run(run_id, status=RunStatus.COMPLETED)
    messages = tuple(assistant(m) for m in extra)
    return await store.commit(
        Commit(session_id="s1", expected_version=version, run=run, messages=messages)
    )


async def _unchanged(store: Store, session: Session, messages: list[StoredMessage]) -> None:
    assert await store.get_session(session.id) == session
    assert await store.read_messages(session.id) == messages


class SubmitContract(ContractBase):
    def test_submit_appends_after_the_last_message(self) -> None:
        async def go(store: Store) -> None:
            await store.create_session(new_session(owner="alice"))
            assert await store.start_run(_submit("r1", "m1")) == CommitResult(1, False)
            assert await _finish(store, "r1", 1, "a1", "a2") == CommitResult(3, False)
            result = await store.start_run(_submit("r2", "m2", owner="alice"))
            assert result == CommitResult(4, False)
            assert await store.read_messages("s1", after=3) == stored(
                user("m2", run_id="r2"), first=4
            )
            session = await store.get_session("s1")
            assert (session.version, session.active_run_id) == (4, "r2")
            assert await store.get_run("r2") == new_run("r2", status=RunStatus.QUEUED)

        self.run(go)

    def test_submit_to_someone_elses_session_is_not_found_and_writes_nothing(self) -> None:
        async def go(store: Store) -> None:
            await store.create_session(new_session(owner="bob"))
            await store.create_session(new_session("s2"))  # no owner: only an admin's
            for sid in ("s1", "s2", "nope"):
                with pytest.raises(SessionNotFoundError) as info:
                    await store.start_run(_submit("r1", "m1", owner="alice", sid=sid))
                assert info.value.details == {"session_id": sid}
            # Busy with bob's run: still "not found" for alice (it tells her nothing).
            await store.start_run(_submit("r1", "m1", owner="bob"))
            before, history = await store.get_session("s1"), await store.read_messages("s1")
            with pytest.raises(SessionNotFoundError):
                await store.start_run(_submit("r2", "m2", owner="alice"))
            # A plain commit with the owner rule is refused the same way.
            with pytest.raises(SessionNotFoundError):
                await store.commit(
                    Commit(session_id="s1", expected_version=1, session_owner="alice",
                           messages=(assistant("a1"),))
                )  # fmt: skip
            await _unchanged(store, before, history)
            assert [r.id for r in await store.list_runs()] == ["r1"]
            assert await store.read_messages("s2") == []
            assert (await store.get_session("s2")).active_run_id is None

        self.run(go)

    def test_submit_to_a_busy_session_is_refused(self) -> None:
        async def go(store: Store) -> None:
            await store.create_session(new_session(owner="alice"))
            await store.start_run(_submit("r1", "m1", owner="alice"))
            before, history = await store.get_session("s1"), await store.read_messages("s1")
            with pytest.raises(SessionBusyError) as info:
                await store.start_run(_submit("r2", "m2", owner="alice"))
            assert info.value.details == {"session_id": "s1", "active_run_id": "r1"}
            await _unchanged(store, before, history)
            assert [r.id for r in await store.list_runs()] == ["r1"]

        self.run(go)

    def test_append_at_end_is_only_for_a_run_start(self) -> None:
        async def go(store: Store) -> None:
            await store.create_session(new_session())
            with pytest.raises(ConfigError):
                await store.commit(
                    Commit(session_id="s1", expected_version=None, messages=(user("m1"),))
                )
            not_a_name = replace(_submit("r1", "m1"), session_owner=7)  # type: ignore[arg-type]
            with pytest.raises(ConfigError):
                await store.start_run(not_a_name)
            assert await store.read_messages("s1") == []

        self.run(go)

    def test_concurrent_submissions_give_one_run(self) -> None:
        async def go(a: Store) -> None:
            b = self.second_handle()
            try:
                await _race(a, b or a)
            finally:
                if b is not None:
                    await b.close()

        self.run(go)


async def _race(a: Store, b: Store) -> None:
    """Two submissions at once (through two handles where the store has them)."""
    await a.create_session(new_session(owner="alice"))
    await a.start_run(_submit("r0", "m0"))
    await _finish(a, "r0", 1)
    got = await asyncio.gather(
        a.start_run(_submit("r1", "m1", owner="alice")),
        b.start_run(_submit("r2", "m2", owner="alice")),
        return_exceptions=True,
    )
    won = [g for g in got if isinstance(g, CommitResult)]
    assert won == [CommitResult(2, False)]
    assert sum(isinstance(g, SessionBusyError) for g in got) == 1
    winner = "r1" if isinstance(got[0], CommitResult) else "r2"
    assert [m.seq for m in await a.read_messages("s1")] == [1, 2]
    assert (await b.get_session("s1")).active_run_id == winner
