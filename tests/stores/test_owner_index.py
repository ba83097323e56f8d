"""The memory and JSONL stores list one owner's sessions from an owner index: a page reads
the sessions on it and nothing else (the SQL stores' index is tested in
test_session_pages.py). The JSONL index is a file, ``sessions.jsonl``, shared by every
handle; a store written before it existed is listed by a scan until its first write,
which builds the index from the session files."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from plait.adapters.stores.jsonl.sessions import SessionFiles
from plait.adapters.stores.jsonl.store import JsonlStore
from plait.adapters.stores.memory.store import MemoryStore
from plait.adapters.stores.shared.session_pages import OwnerIndex
from plait.domain.errors import CorruptStoreError, SessionNotFoundError
from tests.contract.builders import new_session


def _ids(sessions: list[Any]) -> list[str]:
    return [s.id for s in sessions]


async def _fill(store: Any, n: int = 40) -> None:
    for i in range(n):  # alice every fourth, bob the rest
        owner = "alice" if i % 4 == 0 else "bob"
        await store.create_session(new_session(f"s{i:02d}", created_at=float(i), owner=owner))


def test_owner_index_orders_by_time_then_creation_and_moves_a_reindexed_session() -> None:
    index = OwnerIndex()
    for sid, owner, at in [("a", "x", 2.0), ("b", "y", 1.0), ("c", "x", 2.0), ("d", None, 3.0)]:
        index.add(sid, owner, at)
    assert list(index.newest_first(owner=None, before=None)) == ["d", "c", "a", "b"]
    assert list(index.newest_first(owner="x", before=None)) == ["c", "a"]
    assert list(index.newest_first(owner="x", before="d")) == ["c", "a"]
    assert list(index.newest_first(owner="x", before="c")) == ["a"]
    assert list(index.newest_first(owner="z", before="a")) == []
    index.add("a", "y", 0.5)  # indexed again (a retried create): only the last entry counts
    assert list(index.newest_first(owner="x", before=None)) == ["c"]
    assert list(index.newest_first(owner="y", before=None)) == ["b", "a"]
    assert (len(index), index.entry("a")) == (4, ("y", 0.5))
    with pytest.raises(SessionNotFoundError):
        index.newest_first(owner="x", before="nope")


class _Counting(dict[str, Any]):
    def __init__(self, *a: Any) -> None:
        super().__init__(*a)
        self.seen: list[str] = []

    def __getitem__(self, key: str) -> Any:
        self.seen.append(key)
        return super().__getitem__(key)


def test_memory_reads_only_the_page() -> None:
    async def go() -> None:
        store = MemoryStore()
        await _fill(store)
        counting = _Counting(store._sessions)
        store._sessions = counting
        page = await store.list_sessions(owner="alice", before="s30", limit=3)
        assert _ids(page) == ["s28", "s24", "s20"]
        assert counting.seen == ["s28", "s24", "s20"]

    asyncio.run(go())


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    seen: list[str] = []
    real = SessionFiles.read

    def counting(self: SessionFiles, sid: str) -> Any:
        seen.append(sid)
        return real(self, sid)

    monkeypatch.setattr(SessionFiles, "read", counting)
    return seen


def test_jsonl_reads_only_the_page_and_is_shared_by_handles(
    tmp_path: Path, reads: list[str]
) -> None:
    async def go() -> None:
        a, b = JsonlStore(tmp_path / "store"), JsonlStore(tmp_path / "store")
        try:
            await _fill(a, 20)
            await b.create_session(new_session("s99", created_at=99.0, owner="alice"))
            # another owner's damaged file is never opened by alice's listing
            (tmp_path / "store" / "sessions" / "s01.jsonl").write_text("{not json\n")
            reads.clear()
            assert _ids(await a.list_sessions(owner="alice", limit=3)) == ["s99", "s16", "s12"]
            assert reads == ["s99", "s16", "s12"]
            reads.clear()
            page = await a.list_sessions(owner="alice", before="s12", limit=2)
            assert (_ids(page), reads) == (["s08", "s04"], ["s08", "s04"])
            with pytest.warns(UserWarning, match="damaged session file"):
                everyone = await b.list_sessions(before="s03", limit=5)
            assert _ids(everyone) == ["s02", "s00"]
        finally:
            await a.close()
            await b.close()

    asyncio.run(go())


def test_jsonl_skips_an_indexed_session_whose_file_never_landed(tmp_path: Path) -> None:
    async def go() -> None:
        store = JsonlStore(tmp_path / "store")
        try:
            await _fill(store, 8)
            (tmp_path / "store" / "sessions" / "s04.jsonl").unlink()  # as if the create died
            assert _ids(await store.list_sessions(owner="alice")) == ["s00"]
            assert _ids(await store.list_sessions(owner="alice", before="s04")) == ["s00"]
            await store.create_session(new_session("s04", created_at=50.0, owner="bob"))
            assert _ids(await store.list_sessions(owner="bob", limit=2)) == ["s04", "s07"]
            assert _ids(await store.list_sessions(owner="alice")) == ["s00"]
        finally:
            await store.close()

    asyncio.run(go())


def test_a_jsonl_store_from_before_the_index_gets_it_on_its_first_write(tmp_path: Path) -> None:
    index = tmp_path / "store" / "sessions.jsonl"

    async def go() -> None:
        store = JsonlStore(tmp_path / "store")
        try:
            await _fill(store, 12)
            index.unlink()  # a store written by a plait without the index
            assert _ids(await store.list_sessions(owner="alice")) == ["s08", "s04", "s00"]
            assert not index.exists()  # a listing writes nothing
            await store.create_session(new_session("s50", created_at=50.0, owner="alice"))
            lines = [json.loads(x) for x in index.read_text().splitlines()]
            assert [x["session_id"] for x in lines] == [f"s{i:02d}" for i in range(12)] + ["s50"]
            again = JsonlStore(tmp_path / "store")
            try:
                page = await again.list_sessions(owner="alice", limit=3)
                assert _ids(page) == ["s50", "s08", "s04"]
            finally:
                await again.close()
        finally:
            await store.close()

    asyncio.run(go())


def test_a_damaged_jsonl_index_is_a_clear_error(tmp_path: Path) -> None:
    async def go() -> None:
        store = JsonlStore(tmp_path / "store")
        try:
            await _fill(store, 3)
            with (tmp_path / "store" / "sessions.jsonl").open("a") as f:
                f.write('{"schema_version": 1, "session_id": 7, "owner": null}\n')
            with pytest.raises(CorruptStoreError, match=r"sessions.jsonl, line 4"):
                await store.list_sessions(owner="alice")
        finally:
            await store.close()

    asyncio.run(go())
