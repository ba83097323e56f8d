"""Store-level fork behaviour: long units, real concurrent writers, torn JSONL writes."""

from __future__ import annotations

import os
import threading
from dataclasses import replace
from pathlib import Path

import pytest

from plait.adapters.stores.jsonl.store import JsonlStore
from plait.adapters.stores.sqlite.store import SqliteStore
from plait.application.ports import Commit, ForkableStore, ForkCommit
from plait.domain.errors import ConflictError, InvalidCutPointError, MessageNotFoundError
from plait.domain.forks import ForkRecord
from plait.domain.messages import Message
from plait.domain.session import ForkOrigin, Session
from tests.fork.conftest import forks_over, run, seed, stored, user
from tests.fork.test_units import a, r, u


@pytest.mark.slow
def test_a_unit_longer_than_the_first_window_is_still_judged_whole(store: ForkableStore) -> None:
    calls = [f"c{i}" for i in range(150)]
    results = [r(f"res{i}", c) for i, c in enumerate(calls)]
    history: list[Message] = [u("m0"), a("big", *calls), *results]
    history.append(u("after"))

    async def go() -> None:
        await store.create_session(Session(id="S", created_at=1.0))
        await store.commit(Commit(session_id="S", expected_version=0, messages=tuple(history)))
        forks = forks_over(store)
        with pytest.raises(InvalidCutPointError) as e:
            await forks.fork_session("S", "res75", "req-1")
        assert (e.value.details["before"], e.value.details["after"]) == ("m0", "res149")
        ok = await forks.fork_session("S", "res149", "req-2")
        assert await store.read_messages(ok.branch.id) == stored(history[:-1])

    run(go())


def test_store_refuses_a_point_the_source_does_not_hold(store: ForkableStore) -> None:
    async def go() -> None:
        await seed(store)
        record = ForkRecord(
            branch_session_id="B",
            request_id="q",
            caller=None,
            source_session_id="S",
            through_message_id="m3",
            through_seq=4,  # m3 is at #3
            source_version=6,
            created_at=1.0,
        )
        branch = Session(
            id="B",
            created_at=1.0,
            fork_origin=ForkOrigin(parent_session_id="S", fork_point_message_id="m3"),
        )
        with pytest.raises(MessageNotFoundError):
            await store.fork_session(ForkCommit(branch=branch, record=record))
        assert await store.get_fork_record("B") is None
        assert [s.id for s in await store.list_sessions()] == ["S"]
        # A plain session already under the branch's id is a conflict, not a branch.
        await store.create_session(Session(id="B", created_at=1.0))
        valid = replace(record, through_seq=3)
        with pytest.raises(ConflictError):
            await store.fork_session(ForkCommit(branch=branch, record=valid))

    run(go())


def test_sqlite_fork_while_another_connection_appends(tmp_path: Path) -> None:
    """Two handles on one file, as two processes would: one appends to the source in a
    tight loop while the other forks it repeatedly; every branch holds exactly its
    prefix."""
    path = tmp_path / "plait.db"

    async def prepare() -> None:
        store = SqliteStore.open(path)
        await seed(store)
        await store.close()

    run(prepare())
    stop = threading.Event()
    appended: list[str] = []

    def writer() -> None:
        async def go() -> None:
            w = SqliteStore(path)
            i = 0
            while not stop.is_set() and i < 400:
                i += 1
                session = await w.get_session("S")
                m = user(f"w{i}", "concurrent")
                try:
                    await w.commit(
                        Commit(session_id="S", expected_version=session.version, messages=(m,))
                    )
                    appended.append(m.id)
                except ConflictError:
                    continue
            await w.close()

        run(go())

    async def forker() -> list[tuple[int, list[str]]]:
        store = SqliteStore(path)
        forks = forks_over(store)
        seen = []
        for n in range(30):
            result = await forks.fork_session("S", "m6", f"req-{n}")
            ids = [sm.message.id for sm in await store.read_messages(result.branch.id)]
            seen.append((result.record.source_version, ids))
        await store.close()
        return seen

    t = threading.Thread(target=writer)
    t.start()
    try:
        seen = run(forker())
    finally:
        stop.set()
        t.join()
    assert all(ids == ["m1", "m2", "m3", "m4", "m5", "m6"] for _, ids in seen)
    assert all(version >= 6 for version, _ in seen)


def test_jsonl_failed_fork_write_leaves_no_branch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = JsonlStore(tmp_path / "store")

    async def go() -> None:
        await seed(store)
        forks = forks_over(store)
        real_link = os.link

        def broken_link(src: str, dst: str) -> None:
            raise OSError(28, "No space left on device")

        monkeypatch.setattr(os, "link", broken_link)
        with pytest.raises(Exception, match="No space left"):
            await forks.fork_session("S", "m3", "req-1")
        monkeypatch.setattr(os, "link", real_link)
        files = sorted(p.name for p in (tmp_path / "store" / "sessions").iterdir())
        assert files == ["S.jsonl"]  # no branch, no temporary file
        ok = await forks.fork_session("S", "m3", "req-1")
        assert await store.read_messages(ok.branch.id) == (await store.read_messages("S"))[:3]
        await store.close()

    run(go())
