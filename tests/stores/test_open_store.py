from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest

from plait.adapters.stores import JsonlStore, MemoryStore, SqliteStore, Store, open_store
from plait.domain.errors import ConfigError, StoreError
from tests.contract.builders import new_session
from tests.stores.worker import child_env


def _use(store: Store) -> None:
    async def go() -> None:
        await store.create_session(new_session())
        assert (await store.get_session("s1")).id == "s1"
        await store.close()

    asyncio.run(go())


def test_memory() -> None:
    store = open_store("memory://")
    assert isinstance(store, MemoryStore)
    _use(store)


def test_sqlite_relative_and_absolute(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    rel = open_store("sqlite:///state/nested/plait.db")
    assert isinstance(rel, SqliteStore)
    _use(rel)
    assert (tmp_path / "state" / "nested" / "plait.db").is_file()
    absolute = tmp_path / "abs" / "x.db"
    store = open_store(f"sqlite:///{absolute}")
    assert isinstance(store, SqliteStore)
    assert store.path == absolute
    _use(store)


def test_jsonl(tmp_path: Path) -> None:
    store = open_store(f"jsonl:///{tmp_path / 'j'}")
    assert isinstance(store, JsonlStore)
    _use(store)
    assert (tmp_path / "j" / "sessions" / "s1.jsonl").is_file()


@pytest.mark.parametrize(
    "url", ["", "mysql://x", "sqlite://", "sqlite:///", "sqlite:x.db", "jsonl://", "redis://"]
)
def test_unknown_urls_list_the_accepted_forms(url: str) -> None:
    with pytest.raises(ConfigError) as info:
        open_store(url)
    message = str(info.value)
    assert "memory://" in message
    assert "sqlite:///" in message
    assert "jsonl:///" in message
    assert "postgresql://" in message


def test_postgresql_opens_lazily_and_names_an_unreachable_server() -> None:
    from plait.adapters.stores.postgres import PostgresStore

    store = open_store("postgresql://plait:secret@127.0.0.1:1/plait")
    assert isinstance(store, PostgresStore)  # nothing connected yet

    async def go() -> None:
        try:
            await store.get_session("s1")
        finally:
            await store.close()

    with pytest.raises(StoreError) as info:
        asyncio.run(go())
    assert info.value.code == "store_unavailable"  # a server that does not answer
    assert "127.0.0.1:1" in info.value.message
    assert "secret" not in info.value.message  # the password is never shown


def test_backends_are_imported_lazily() -> None:
    code = (
        "import sys, plait.adapters.stores as s\n"
        "print(sorted(m for m in sys.modules if m.startswith('plait.adapters.stores.')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=child_env(), check=True
    )
    assert out.stdout.strip() == "[]"
