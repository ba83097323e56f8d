"""PostgreSQL writes of one statement run in autocommit, each its own durable transaction:
no ``BEGIN`` and ``COMMIT`` round trips around them, and the same answers, refusals
included."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from plait.adapters.stores.postgres.store import PostgresStore
from plait.application.ports import Commit
from plait.domain.errors import ConflictError, LeaseLostError, NotFoundError
from plait.domain.runs import RunStatus
from plait.domain.service import ApiKey, Role
from tests.contract.builders import new_run, new_session, user
from tests.pg import empty_database, run_with


@pytest.fixture
def url(pg_url: str) -> str:
    empty_database(pg_url)
    return pg_url


def _blocks(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the transaction blocks the store's connections open."""
    opened: list[int] = []
    original = psycopg.AsyncConnection.transaction

    def counting(self: Any, *args: Any, **kwargs: Any) -> Any:
        opened.append(1)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(psycopg.AsyncConnection, "transaction", counting)
    return opened


def test_one_statement_writes_open_no_transaction_block(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def go(store: PostgresStore) -> None:
        run = new_run("r1", session_id="s1", status=RunStatus.QUEUED, started_at=1.0)
        await store.create_session(new_session("s1"))
        await store.start_run(
            Commit(session_id="s1", expected_version=0, run=run, messages=(user("m1"),))
        )
        opened = _blocks(monkeypatch)
        await store.create_session(new_session("s2", created_at=2_000.0))
        claimed = await store.claim_run("r1", owner="w", now=2.0, expires_at=10.0)
        await store.renew_lease("r1", owner="w", expires_at=20.0, lease_token=claimed.lease_token)
        cancelled = await store.request_cancel("r1")
        ref = await store.put_artifact(b"bytes", media_type="text/plain")
        await store.save_token_counts("s1", "meter", {"m1": 7})
        key = ApiKey(id="k1", principal="ana", role=Role.USER, key_hash="a" * 64, created_at=1.0)
        await store.add_api_key(key)
        assert opened == []
        assert [s.id for s in await store.list_sessions()] == ["s2", "s1"]
        assert (claimed.lease.owner if claimed.lease else None) == "w"
        assert cancelled.cancel_requested
        stored = await store.get_run("r1")
        assert stored.lease is not None and stored.lease.expires_at == 20.0
        assert await store.get_artifact(ref.id) == (ref, b"bytes")
        assert await store.read_token_counts("s1", "meter") == {"m1": 7}
        assert await store.find_api_key("a" * 64) == key

    run_with(url, go)


def test_their_refusals_are_unchanged(url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    async def go(store: PostgresStore) -> None:
        run = new_run("r1", session_id="s1", status=RunStatus.QUEUED, started_at=1.0)
        await store.create_session(new_session("s1"))
        await store.start_run(
            Commit(session_id="s1", expected_version=0, run=run, messages=(user("m1"),))
        )
        claimed = await store.claim_run("r1", owner="w", now=2.0, expires_at=10.0)
        opened = _blocks(monkeypatch)
        with pytest.raises(ConflictError, match="s1"):
            await store.create_session(new_session("s1"))
        with pytest.raises(LeaseLostError):  # held by w until 10
            await store.claim_run("r1", owner="x", now=3.0, expires_at=30.0)
        with pytest.raises(LeaseLostError):  # an older token
            await store.renew_lease(
                "r1", owner="w", expires_at=40.0, lease_token=claimed.lease_token - 1
            )
        with pytest.raises(NotFoundError):
            await store.renew_lease("nope", owner="w", expires_at=40.0)
        with pytest.raises(NotFoundError):
            await store.request_cancel("nope")
        with pytest.raises(NotFoundError):
            await store.claim_run("nope", owner="w", now=3.0, expires_at=30.0)
        assert opened == []
        stored = await store.get_run("r1")  # nothing the refused calls wrote
        assert stored.lease is not None and (stored.lease.owner, stored.lease.expires_at) == (
            "w",
            10.0,
        )
        assert not stored.cancel_requested

    run_with(url, go)
