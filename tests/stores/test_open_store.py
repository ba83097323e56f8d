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
    from plait.adapters.stores.postgres.store import PostgresStore

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


@pytest.mark.slow
def test_backends_are_imported_lazily() -> None:
    """Importing the stores package imports no backend (only ``shared/redact.py``, which
    the package's URL errors use, of the code under it)."""
    backends = tuple(
        f"plait.adapters.stores.{name}" for name in ("memory", "sqlite", "postgres", "jsonl")
    )
    code = (
        "import sys, plait.adapters.stores\n"
        f"print(sorted(m for m in sys.modules if m.startswith({backends!r})))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=child_env(), check=True
    )
    assert out.stdout.strip() == "[]"


SECRET = "hunter2-sekret"
LEAKY_URLS = [
    f"postgresql://plait@127.0.0.1:1/plait?password={SECRET}",
    f"postgresql://plait@127.0.0.1:1/plait?sslmode=disable&password={SECRET}",
    f"postgresql://plait@127.0.0.1:1/plait?sslpassword={SECRET}&password={SECRET}",
    f"postgres://plait:{SECRET}@127.0.0.1:1/plait",
]


@pytest.mark.parametrize("url", LEAKY_URLS)
def test_a_password_in_a_postgresql_url_is_never_printed(url: str) -> None:
    """Also given as ``?password=`` (an attack found it printed whole in the error)."""
    from plait.adapters.stores.postgres.store import PostgresStore

    store = open_store(url)
    assert isinstance(store, PostgresStore)
    assert SECRET not in repr(store)

    async def go() -> None:
        try:
            await store.get_session("s1")
        finally:
            await store.close()

    with pytest.raises(StoreError) as info:
        asyncio.run(go())
    assert "127.0.0.1" in info.value.message
    assert SECRET not in info.value.message
    assert SECRET not in repr(info.value.details)
    assert "***" in info.value.message


@pytest.mark.parametrize(
    "url",
    [
        f"postgresq://plait:{SECRET}@h/db",
        f"mysql://u@h/db?password={SECRET}",
        f"host=h user=u password={SECRET} dbname=d",
        f"host=h password = '{SECRET} with spaces' dbname=d",
    ],
)
def test_a_mistyped_store_url_does_not_print_its_password(url: str) -> None:
    with pytest.raises(ConfigError) as info:
        open_store(url)
    assert SECRET not in str(info.value)
    assert SECRET not in repr(info.value.details)


def test_redacted_urls_keep_what_locates_the_store() -> None:
    from plait.adapters.stores.shared.redact import redact_url

    assert redact_url("postgresql://u:p@h:5/db?sslmode=require&password=x#f") == (
        "postgresql://u:***@h:5/db?sslmode=require&password=***#f"
    )
    assert redact_url("postgresql://u@h/db") == "postgresql://u@h/db"
    assert redact_url("sqlite:///a/b.db") == "sqlite:///a/b.db"
    assert redact_url("postgresql://u@h/db?passfile=/p") == "postgresql://u@h/db?passfile=/p"
    # A password holding '@', '/' or ':' is hidden whole.
    for password in (f"{SECRET}@x", f"ab/{SECRET}", f"a:{SECRET}"):
        assert redact_url(f"postgresql://u:{password}@h/db") == "postgresql://u:***@h/db"


def test_a_runtime_names_its_store_without_the_password() -> None:
    from plait.runtime import Runtime

    async def go() -> str:
        rt = Runtime.open(db=LEAKY_URLS[0], store_only=True)
        try:
            return rt.queries.store_info().location
        finally:
            await rt.close()

    where = asyncio.run(go())
    assert SECRET not in where and where.endswith("?password=***")
