"""A store given text it cannot keep (a NUL on PostgreSQL, a lone surrogate anywhere)
refuses it with a clear ``invalid_value`` error and writes nothing: never an encoding
traceback (issue 20, item 5; the boundaries refuse such text first, this is the last
line)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from plait.adapters.stores import Store
from plait.adapters.stores.jsonl.store import JsonlStore
from plait.adapters.stores.postgres.store import PostgresStore
from plait.adapters.stores.sqlite.store import SqliteStore
from plait.domain.errors import ValidationError
from plait.domain.session import Session
from tests.pg import empty_database


def _open(kind: str, tmp: Path, request: pytest.FixtureRequest) -> Store:
    if kind == "jsonl":
        return JsonlStore(tmp / "jsonl")
    if kind == "sqlite":
        return SqliteStore.open(tmp / "plait.db")
    url: str = request.getfixturevalue("pg_url")
    empty_database(url)
    return PostgresStore(url)


@pytest.mark.parametrize(
    ("kind", "title"),
    [
        ("sqlite", "a\udcffb"),
        ("jsonl", "a\udcffb"),
        ("postgres", "a\udcffb"),
        ("postgres", "a\x00b"),
    ],
    ids=["sqlite-surrogate", "jsonl-surrogate", "postgres-surrogate", "postgres-nul"],
)
def test_a_store_refuses_text_it_cannot_keep_as_invalid_value(
    kind: str, title: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    store = _open(kind, tmp_path, request)

    async def go() -> None:
        try:
            with pytest.raises(ValidationError) as e:
                await store.create_session(Session(id="s1", created_at=1.0, title=title))
            assert "cannot be stored" in e.value.message, e.value.message
            assert await store.list_sessions() == []
            await store.create_session(Session(id="s1", created_at=1.0, title="fine"))
        finally:
            await store.close()

    asyncio.run(go())
