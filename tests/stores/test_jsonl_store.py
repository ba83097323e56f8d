"""JSONL-specific behaviour: the file format, torn and corrupt lines, many processes."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from plait.adapters.stores.jsonl.store import JsonlStore, StoreWarning
from plait.application.ports import Commit
from plait.domain.errors import (
    ConfigError,
    CorruptStoreError,
    RunNotFoundError,
    SessionNotFoundError,
)
from plait.domain.runs import RunStatus
from plait.domain.session import StoredMessage
from tests.contract.builders import execution, mixed_history, new_run, new_session, user
from tests.stores.worker import run_workers


def _write_session(root: Path, *messages: int) -> None:
    """Session s1 with run r1, then one commit per count in ``messages``."""

    async def go() -> None:
        store = JsonlStore(root)
        await store.create_session(new_session())
        await store.start_run(Commit(session_id="s1", expected_version=0, run=new_run()))
        version = 0
        for n in messages:
            batch = tuple(user(f"m{version + i + 1}") for i in range(n))
            version = (
                await store.commit(
                    Commit(session_id="s1", expected_version=version, messages=batch)
                )
            ).version
        await store.close()

    asyncio.run(go())


def _read(root: Path) -> list[StoredMessage]:
    async def go() -> list[StoredMessage]:
        store = JsonlStore(root)
        try:
            return await store.read_messages("s1")
        finally:
            await store.close()

    return asyncio.run(go())


def _stored(*ids: str) -> list[StoredMessage]:
    return [StoredMessage(i + 1, user(m)) for i, m in enumerate(ids)]


def test_one_line_per_write_each_versioned(tmp_path: Path) -> None:
    async def go() -> None:
        store = JsonlStore(tmp_path)
        await store.create_session(new_session())
        await store.start_run(
            Commit(
                session_id="s1",
                expected_version=0,
                run=new_run(),
                messages=(user("m1"),),
                executions=(execution("c1"),),
            )
        )
        await store.commit(
            Commit(session_id="s1", expected_version=1, messages=tuple(mixed_history()[1:]))
        )
        await store.request_cancel("r1")
        await store.claim_run("r1", owner="w", now=0.0, expires_at=9.0)
        await store.close()

    asyncio.run(go())
    lines = (tmp_path / "sessions" / "s1.jsonl").read_text(encoding="utf-8").splitlines()
    records = [json.loads(line) for line in lines]
    assert [r["op"] for r in records] == ["create", "start_run", "commit", "cancel", "lease"]
    assert all(r["schema_version"] == 1 for r in records)
    assert records[1]["active_run_id"] == "r1"
    assert [m["seq"] for m in records[2]["messages"]] == list(range(2, 8))
    assert records[3]["run"]["cancel_requested"] is True
    assert records[4]["run"]["lease"] == {"owner": "w", "expires_at": 9.0}
    index = (tmp_path / "runs.jsonl").read_text(encoding="utf-8").splitlines()
    assert [json.loads(line) for line in index] == [
        {"schema_version": 1, "run_id": "r1", "session_id": "s1"}
    ]


def test_torn_last_line_is_discarded_with_a_warning(tmp_path: Path) -> None:
    _write_session(tmp_path, 1, 1)
    path = tmp_path / "sessions" / "s1.jsonl"
    good = path.read_bytes()
    path.write_bytes(good + b'{"schema_version":1,"op":"commit","messages":[{"seq":3,"mes')
    with pytest.warns(StoreWarning, match="torn last line"):
        assert _read(tmp_path) == _stored("m1", "m2")
    assert path.read_bytes().startswith(good)  # reading changed nothing

    async def write_after() -> None:
        store = JsonlStore(tmp_path)
        with pytest.warns(StoreWarning):
            await store.commit(Commit(session_id="s1", expected_version=2, messages=(user("m3"),)))
        await store.close()

    asyncio.run(write_after())
    assert _read(tmp_path) == _stored("m1", "m2", "m3")  # and no warning any more
    assert path.read_bytes().endswith(b"\n")


def test_corrupt_middle_line_names_file_and_line(tmp_path: Path) -> None:
    _write_session(tmp_path, 1, 1, 1)
    path = tmp_path / "sessions" / "s1.jsonl"
    lines = path.read_bytes().splitlines(keepends=True)
    lines[3] = b'{"schema_version":1,"op":"commit","messages":[{"seq":3 GARBAGE\n'
    damaged = b"".join(lines)
    path.write_bytes(damaged)
    with pytest.raises(CorruptStoreError) as info:
        _read(tmp_path)
    assert str(path) in str(info.value)
    assert info.value.details["line"] == 4

    async def try_write() -> None:
        store = JsonlStore(tmp_path)
        with pytest.raises(CorruptStoreError):
            await store.commit(Commit(session_id="s1", expected_version=3, messages=(user("x"),)))
        await store.close()

    asyncio.run(try_write())
    assert path.read_bytes() == damaged


def test_complete_but_invalid_line_is_corruption(tmp_path: Path) -> None:
    _write_session(tmp_path, 1)
    path = tmp_path / "sessions" / "s1.jsonl"
    lines = path.read_bytes().splitlines(keepends=True)
    record = json.loads(lines[2])
    record["messages"][0]["seq"] = 7  # a gap in the history
    damaged = b"".join(lines[:2]) + json.dumps(record).encode() + b"\n" + b'{"torn'
    path.write_bytes(damaged)
    with pytest.raises(CorruptStoreError, match="line 3"):
        _read(tmp_path)

    async def try_write() -> None:
        store = JsonlStore(tmp_path)
        with pytest.raises(CorruptStoreError):
            await store.commit(Commit(session_id="s1", expected_version=1, messages=(user("x"),)))
        await store.close()

    asyncio.run(try_write())
    assert path.read_bytes() == damaged  # the torn tail is not cut off a corrupt file


def test_newer_schema_version_line_is_refused(tmp_path: Path) -> None:
    _write_session(tmp_path, 1)
    path = tmp_path / "sessions" / "s1.jsonl"
    with path.open("a", encoding="utf-8") as f:
        f.write(json.dumps({"schema_version": 2, "op": "commit"}) + "\n")
    with pytest.raises(CorruptStoreError, match="newer than this plait"):
        _read(tmp_path)


def test_dangling_index_entry_is_not_a_run(tmp_path: Path) -> None:
    _write_session(tmp_path)
    with (tmp_path / "runs.jsonl").open("a", encoding="utf-8") as f:
        f.write(json.dumps({"schema_version": 1, "run_id": "r9", "session_id": "s1"}) + "\n")

    async def go() -> None:
        store = JsonlStore(tmp_path)
        with pytest.raises(RunNotFoundError):
            await store.get_run("r9")
        assert [r.id for r in await store.list_runs()] == ["r1"]
        await store.close()

    asyncio.run(go())


def test_unsafe_session_id_is_refused(tmp_path: Path) -> None:
    async def go() -> None:
        store = JsonlStore(tmp_path)
        with pytest.raises(ConfigError):
            await store.create_session(new_session("../escape"))
        await store.close()

    asyncio.run(go())
    assert not (tmp_path.parent / "escape.jsonl").exists()


def test_tampered_artifact_is_detected(tmp_path: Path) -> None:
    async def go() -> None:
        store = JsonlStore(tmp_path)
        ref = await store.put_artifact(b"hello world", media_type="text/plain")
        path = tmp_path / "artifacts" / ref.id
        path.write_bytes(path.read_bytes().replace(b"hello", b"HELLO"))
        with pytest.raises(CorruptStoreError):
            await store.get_artifact(ref.id)
        await store.close()

    asyncio.run(go())
    assert not list((tmp_path / "artifacts").glob(".*.tmp"))


@pytest.mark.slow
def test_two_processes_race_for_one_version(tmp_path: Path) -> None:
    _write_session(tmp_path)
    results = run_workers(f"jsonl:///{tmp_path}", tmp_path, "race")
    assert sorted(str(r["outcome"]) for r in results) == ["conflict", "ok"]
    loser = next(r for r in results if r["outcome"] == "conflict")
    assert loser["details"] == {"session_id": "s1", "expected": 0, "actual": 1}
    assert len(_read(tmp_path)) == 1


@pytest.mark.slow
def test_two_processes_append_without_interleaving(tmp_path: Path) -> None:
    _write_session(tmp_path)
    n = 30
    results = run_workers(f"jsonl:///{tmp_path}", tmp_path, "loop", n=n)
    assert all(r["outcome"] == "ok" for r in results)
    history = _read(tmp_path)
    assert [sm.seq for sm in history] == list(range(1, 2 * n + 1))
    for name in ("a", "b"):
        mine = [sm.message.id for sm in history if sm.message.id.startswith(f"{name}-")]
        assert mine == [f"{name}-{i}" for i in range(n)]
    lines = (tmp_path / "sessions" / "s1.jsonl").read_bytes().splitlines()
    assert all(json.loads(line)["schema_version"] == 1 for line in lines)


def test_torn_create_line_leaves_no_session(tmp_path: Path) -> None:
    (tmp_path / "sessions").mkdir()
    path = tmp_path / "sessions" / "s1.jsonl"
    path.write_bytes(b'{"schema_version":1,"op":"create","sess')

    async def go() -> None:
        store = JsonlStore(tmp_path)
        with pytest.warns(StoreWarning), pytest.raises(SessionNotFoundError):
            await store.get_session("s1")
        assert await store.list_sessions() == []
        await store.create_session(new_session())  # cuts the torn line, writes a whole one
        assert await store.get_session("s1") == new_session()
        await store.close()

    asyncio.run(go())
    assert len(path.read_bytes().splitlines()) == 1


def test_torn_run_index_line(tmp_path: Path) -> None:
    _write_session(tmp_path)
    index = tmp_path / "runs.jsonl"
    index.write_bytes(index.read_bytes() + b'{"schema_version":1,"run_id":"r')

    async def go() -> None:
        store = JsonlStore(tmp_path)
        with pytest.warns(StoreWarning, match="runs.jsonl"):
            assert (await store.get_run("r1")).id == "r1"
        done = new_run().ended(RunStatus.COMPLETED, 2_000.0)
        await store.commit(Commit(session_id="s1", expected_version=0, run=done))
        await store.start_run(Commit(session_id="s1", expected_version=0, run=new_run("r2")))
        assert [r.id for r in await store.list_runs()] == ["r2", "r1"]
        await store.close()

    asyncio.run(go())
    assert [json.loads(line)["run_id"] for line in index.read_bytes().splitlines()] == [
        "r1",
        "r2",
    ]


class _Died(BaseException):
    pass


def test_mid_line_hook_leaves_a_torn_line_that_the_next_load_discards(tmp_path: Path) -> None:
    _write_session(tmp_path, 1)

    def die(point: str) -> None:
        assert point == "mid_line"
        raise _Died

    async def crash() -> None:
        store = JsonlStore(tmp_path, checkpoint=die)
        with pytest.raises(_Died):
            await store.commit(Commit(session_id="s1", expected_version=1, messages=(user("m2"),)))

    asyncio.run(crash())
    raw = (tmp_path / "sessions" / "s1.jsonl").read_bytes()
    assert not raw.endswith(b"\n")  # half a line reached the file

    async def reload() -> None:
        store = JsonlStore(tmp_path)
        with pytest.warns(StoreWarning, match="torn last line"):
            history = await store.read_messages("s1")
        assert history == [StoredMessage(1, user("m1"))]
        # the next write cuts the torn tail and appends after the last whole line
        await store.commit(Commit(session_id="s1", expected_version=1, messages=(user("m2"),)))
        assert await store.read_messages("s1") == [
            StoredMessage(1, user("m1")),
            StoredMessage(2, user("m2")),
        ]
        await store.close()

    asyncio.run(reload())
