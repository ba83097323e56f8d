"""SQLite-specific behaviour: damaged files, schema versions, locking, many processes."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from plait.adapters.stores.shared import rows as _sqlite_rows
from plait.adapters.stores.sqlite.store import SqliteStore
from plait.application.ports import Commit
from plait.domain.errors import ConflictError, CorruptStoreError, PlaitError
from plait.domain.messages import UserMessage
from plait.domain.session import StoredMessage
from tests.contract.builders import mixed_history, new_session, user
from tests.stores.worker import run_workers


def _make(path: Path, messages: int = 0, size: int = 10) -> None:
    async def go() -> None:
        store = SqliteStore.open(path)
        await store.create_session(new_session())
        batch = tuple(user(f"m{i}", text=f"{i}:" + "x" * size) for i in range(messages))
        if batch:
            await store.commit(Commit(session_id="s1", expected_version=0, messages=batch))
        await store.close()

    asyncio.run(go())


def _load(path: Path) -> list[StoredMessage]:
    async def go() -> list[StoredMessage]:
        store = SqliteStore(path)
        try:
            await store.get_session("s1")
            return await store.read_messages("s1")
        finally:
            await store.close()

    return asyncio.run(go())


def test_not_a_database_is_left_alone(tmp_path: Path) -> None:
    path = tmp_path / "notes.db"
    path.write_bytes(b"these are my notes, not a database\n" * 200)
    before = path.read_bytes()
    with pytest.raises(CorruptStoreError) as info:
        SqliteStore(path)
    assert str(path) in str(info.value)
    assert path.read_bytes() == before


def test_corrupt_pages_raise_corrupt_store_error(tmp_path: Path) -> None:
    path = tmp_path / "plait.db"
    _make(path, messages=400, size=1000)
    data = bytearray(path.read_bytes())
    assert len(data) > 200_000
    middle = len(data) // 2 // 4096 * 4096
    data[middle : middle + 3 * 4096] = b"\xab" * (3 * 4096)
    path.write_bytes(bytes(data))
    with pytest.raises(CorruptStoreError) as info:
        _load(path)
    assert str(path) in str(info.value)
    assert path.read_bytes() == bytes(data)


def test_newer_schema_version_is_refused_untouched(tmp_path: Path) -> None:
    path = tmp_path / "plait.db"
    _make(path, messages=3)
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE meta SET value = '99' WHERE key = 'schema_version'")
    conn.close()
    before = path.read_bytes()
    with pytest.raises(CorruptStoreError, match="newer") as info:
        SqliteStore(path)
    assert info.value.details["schema_version"] == 99
    assert path.read_bytes() == before


def test_foreign_sqlite_database_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "other.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE accounts (id INTEGER PRIMARY KEY)")
    conn.commit()
    conn.close()
    before = path.read_bytes()
    with pytest.raises(CorruptStoreError, match="not a plait store"):
        SqliteStore(path)
    assert path.read_bytes() == before


def test_reopen_keeps_everything(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "dir" / "plait.db"
    history = mixed_history()

    async def write() -> None:
        store = SqliteStore.open(path)
        await store.create_session(new_session())
        await store.commit(Commit(session_id="s1", expected_version=0, messages=tuple(history)))
        await store.close()

    asyncio.run(write())
    assert _load(path) == [StoredMessage(i + 1, m) for i, m in enumerate(history)]
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    conn.close()


def test_lock_held_too_long_is_a_conflict(tmp_path: Path) -> None:
    path = tmp_path / "plait.db"
    _make(path)
    blocker = sqlite3.connect(path, isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")

    async def go() -> None:
        store = SqliteStore(path, busy_timeout_s=0.05)
        try:
            with pytest.raises(ConflictError, match="another writer"):
                await store.commit(
                    Commit(session_id="s1", expected_version=0, messages=(user("m1"),))
                )
        finally:
            await store.close()

    try:
        asyncio.run(go())
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()
    assert _load(path) == []


def test_message_ids_are_unique_per_session_not_globally(tmp_path: Path) -> None:
    """Appends always store a new body; a fork will share bodies by copying membership
    rows (message_pk), not by re-appending ids. The same id appended to two sessions is
    two independent messages."""

    async def go() -> None:
        store = SqliteStore(tmp_path / "plait.db")
        for sid in ("s1", "s2"):
            await store.create_session(new_session(sid))
        await store.commit(Commit(session_id="s1", expected_version=0, messages=(user("m1"),)))
        other = user("m1", text="other")
        await store.commit(Commit(session_id="s2", expected_version=0, messages=(other,)))
        assert await store.read_messages("s1") == [StoredMessage(1, user("m1"))]
        assert await store.read_messages("s2") == [StoredMessage(1, other)]
        with pytest.raises(ConflictError, match="already stored"):
            await store.commit(Commit(session_id="s2", expected_version=1, messages=(other,)))
        assert (await store.get_session("s2")).version == 1
        await store.close()

    asyncio.run(go())


def test_fast_row_builders_are_active() -> None:
    # If this fails, the domain message classes changed: update the builders in
    # _sqlite_rows (the store still works, through the slower constructors).
    assert _sqlite_rows.FAST


def test_closed_store_raises_plait_errors(tmp_path: Path) -> None:
    async def go() -> None:
        store = SqliteStore(tmp_path / "plait.db")
        await store.close()
        with pytest.raises(PlaitError, match="closed"):
            await store.read_messages("s1")
        with pytest.raises(PlaitError, match="closed"):
            await store.claim_run("r1", owner="a", now=0.0, expires_at=1.0)

    asyncio.run(go())


@pytest.mark.slow
def test_two_processes_race_for_one_version(tmp_path: Path) -> None:
    path = tmp_path / "plait.db"
    _make(path)
    results = run_workers(f"sqlite:///{path}", tmp_path, "race")
    assert sorted(str(r["outcome"]) for r in results) == ["conflict", "ok"]
    loser = next(r for r in results if r["outcome"] == "conflict")
    assert loser["code"] == "conflict"
    assert loser["details"] == {"session_id": "s1", "expected": 0, "actual": 1}
    assert len(_load(path)) == 1


@pytest.mark.slow
def test_two_processes_append_without_interleaving(tmp_path: Path) -> None:
    path = tmp_path / "plait.db"
    _make(path)
    n = 40
    results = run_workers(f"sqlite:///{path}", tmp_path, "loop", n=n)
    assert all(r["outcome"] == "ok" for r in results)
    history = _load(path)
    assert [sm.seq for sm in history] == list(range(1, 2 * n + 1))
    for name in ("a", "b"):
        mine = [sm.message for sm in history if sm.message.id.startswith(f"{name}-")]
        assert [m.id for m in mine] == [f"{name}-{i}" for i in range(n)]
        assert all(isinstance(m, UserMessage) and m.text == name for m in mine)


def test_a_schema_1_store_is_upgraded_with_lease_tokens(tmp_path: Path) -> None:
    """A store written before fencing (schema 1: no ``runs.lease_token``) opens, its runs
    read with token 0, and the next claim fences as everywhere else."""
    from plait.adapters.stores.sqlite.conn import SCHEMA_VERSION
    from plait.domain.errors import LeaseLostError
    from tests.contract.builders import lease, new_run

    path = tmp_path / "plait.db"

    async def make() -> None:
        store = SqliteStore.open(path)
        await store.create_session(new_session())
        run = new_run(lease=lease("w1"))
        await store.start_run(Commit(session_id="s1", expected_version=0, run=run))
        await store.close()

    asyncio.run(make())
    with sqlite3.connect(path) as conn:  # back to how schema 1 stored runs
        conn.execute("ALTER TABLE runs DROP COLUMN lease_token")
        conn.execute("ALTER TABLE sessions DROP COLUMN model")
        conn.execute("UPDATE meta SET value = '1' WHERE key = 'schema_version'")
    conn.close()

    async def reopen() -> None:
        store = SqliteStore(path)
        try:
            assert (await store.get_run("r1")).lease_token == 0
            claimed = await store.claim_run("r1", owner="w2", now=3_000.0, expires_at=4_000.0)
            assert claimed.lease_token == 1
            with pytest.raises(LeaseLostError):
                await store.renew_lease("r1", owner="w2", expires_at=5_000.0, lease_token=0)
        finally:
            await store.close()

    asyncio.run(reopen())
    with sqlite3.connect(path) as conn:
        row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    conn.close()
    assert row[0] == str(SCHEMA_VERSION) == "4"


def test_a_schema_3_store_is_upgraded_with_session_models(tmp_path: Path) -> None:
    """A store written before sessions remembered their model (schema 3) opens: its
    sessions read without one, a new session keeps its model (issue 26 item 4)."""
    from dataclasses import replace

    path = tmp_path / "plait.db"

    async def make() -> None:
        store = SqliteStore.open(path)
        await store.create_session(new_session())
        await store.close()

    asyncio.run(make())
    with sqlite3.connect(path) as conn:  # back to how schema 3 stored sessions
        conn.execute("ALTER TABLE sessions DROP COLUMN model")
        conn.execute("UPDATE meta SET value = '3' WHERE key = 'schema_version'")
    conn.close()

    async def reopen() -> None:
        store = SqliteStore(path)
        try:
            assert (await store.get_session("s1")).model is None
            await store.create_session(replace(new_session("s2"), model="scripted:m.json"))
            assert (await store.get_session("s2")).model == "scripted:m.json"
        finally:
            await store.close()

    asyncio.run(reopen())


def test_opening_an_up_to_date_store_writes_nothing_and_reads_its_version_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "plait.db"
    _make(path, messages=2)
    statements: list[str] = []
    connect = sqlite3.connect

    def traced(*args: Any, **kwargs: Any) -> sqlite3.Connection:
        conn = connect(*args, **kwargs)
        assert isinstance(conn, sqlite3.Connection)
        conn.set_trace_callback(statements.append)
        return conn

    monkeypatch.setattr(sqlite3, "connect", traced)
    store = SqliteStore(path)
    asyncio.run(store.close())
    opening = [s for s in statements if not s.startswith("PRAGMA")]
    assert opening == [
        "SELECT name FROM sqlite_master",
        "SELECT value FROM meta WHERE key = 'schema_version'",
    ]
