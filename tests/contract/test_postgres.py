from __future__ import annotations

import asyncio
import json

import psycopg
import pytest

from plait.adapters.stores import Store
from plait.adapters.stores.postgres.arrays import Bytes, Floats, Ints, Texts
from plait.adapters.stores.postgres.store import PostgresStore
from plait.application.ports import Commit, CommitResult
from plait.domain.errors import ConflictError, StoreError
from plait.domain.messages import UserMessage
from plait.domain.service import EventType, NewRunEvent
from tests.contract.approval_contract import InboxContract
from tests.contract.builders import new_session, user
from tests.contract.store_contract import StoreContract
from tests.contract.summary_contract import SummaryContract
from tests.pg import empty_database


class TestPostgresStore(StoreContract, InboxContract):
    @pytest.fixture(autouse=True)
    def _pg(self, pg_url: str) -> None:
        self.pg_url = pg_url
        empty_database(pg_url)

    def create_store(self) -> Store:
        return PostgresStore(self.pg_url)

    def second_handle(self) -> Store | None:
        return PostgresStore(self.pg_url)


def test_upgrade_is_idempotent(pg_url: str) -> None:
    async def go() -> tuple[int, int]:
        store = PostgresStore(pg_url)
        try:
            return await store.upgrade()
        finally:
            await store.close()

    before, after = asyncio.run(go())
    assert before == after


def test_concurrent_writers_of_one_session_never_interleave(pg_url: str) -> None:
    empty_database(pg_url)

    async def go() -> None:
        store = PostgresStore(pg_url, max_size=8)
        try:
            await store.create_session(new_session())
            commits = [
                store.commit(Commit(session_id="s1", expected_version=0, messages=(user(f"m{i}"),)))
                for i in range(12)
            ]
            results = await asyncio.gather(*commits, return_exceptions=True)
            won = [r for r in results if isinstance(r, CommitResult)]
            lost = [r for r in results if isinstance(r, ConflictError)]
            assert len(won) == 1 and len(lost) == 11, results
            assert all(e.details.get("expected") == 0 for e in lost)
            history = await store.read_messages("s1")
            assert [m.seq for m in history] == [1]
        finally:
            await store.close()

    asyncio.run(go())


def test_a_newer_schema_is_refused_untouched(pg_url: str) -> None:
    empty_database(pg_url)
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("INSERT INTO plait_schema (version) VALUES (999)")
    try:

        async def go() -> None:
            store = PostgresStore(pg_url)
            try:
                await store.list_sessions()
            finally:
                await store.close()

        with pytest.raises(StoreError) as info:
            asyncio.run(go())
        assert "newer plait" in info.value.message
    finally:
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute("DELETE FROM plait_schema WHERE version = 999")


def test_db_upgrade_command(pg_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    from plait.entrypoints.cli.main import main

    empty_database(pg_url)
    assert main(["db", "upgrade", "--db", pg_url, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["from_version"] == out["to_version"] >= 1
    assert main(["db", "upgrade", "--db", "memory://", "--json"]) == 2
    err = json.loads(capsys.readouterr().out)["error"]
    assert err["code"] == "config_error" and "PostgreSQL" in err["message"]


class TestPostgresSummaries(SummaryContract):
    @pytest.fixture(autouse=True)
    def _pg(self, pg_url: str) -> None:
        self.pg_url = pg_url
        empty_database(pg_url)

    def create_store(self) -> Store:
        return PostgresStore(self.pg_url)

    def second_handle(self) -> Store | None:
        return PostgresStore(self.pg_url)


def test_whole_number_times_and_nul_text_round_trip(pg_url: str) -> None:
    """Commits and events go to the server as binary arrays (one element type each):
    times given as ints, text with NUL characters and JSON quotes come back unchanged."""
    empty_database(pg_url)

    async def go() -> None:
        store = PostgresStore(pg_url)
        try:
            await store.create_session(new_session())
            texts = ['say "hi"\\n', "nul \x00 inside"]
            messages = (
                UserMessage(id="m1", text=texts[0], created_at=5),
                UserMessage(id="m2", text=texts[1], created_at=5.5),
            )
            result = await store.commit(
                Commit(session_id="s1", expected_version=0, messages=messages)
            )
            assert result.version == 2
            stored = await store.read_messages("s1")
            assert [m.message for m in stored] == list(messages)
            events = [
                NewRunEvent(type=EventType.STEP_STARTED, at=7, data={"q": '"x"'}),
                NewRunEvent(type=EventType.STEP_STARTED, at=7.25, data={}),
            ]
            written = await store.append_run_events("r1", events)
            assert [e.seq for e in written] == [1, 2]
            back = await store.read_run_events("r1")
            assert [(e.at, e.data) for e in back] == [(7, {"q": '"x"'}), (7.25, {})]
        finally:
            await store.close()

    asyncio.run(go())


@pytest.mark.parametrize(
    ("value", "sql_type"),
    [
        (Texts(["a", None, 'q"uote\\', "中文", ""]), "text[]"),
        (Texts([]), "text[]"),
        (Texts([None]), "text[]"),
        (Bytes([b"x\x00y", None, b""]), "bytea[]"),
        (Floats([1, 2.5, None, -0.125, 1e300]), "double precision[]"),
        (Ints([1, None, -(2**31), 2**31 - 1]), "integer[]"),
        (Ints([]), "integer[]"),
    ],
)
def test_typed_arrays_round_trip_in_binary(pg_url: str, value: list[object], sql_type: str) -> None:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        row = conn.execute(f"SELECT %b::{sql_type}, pg_typeof(%b)::text", (value, value)).fetchone()
    assert row is not None
    assert row[0] == list(value) and row[1] == sql_type


@pytest.mark.slow
def test_migration_11_gives_existing_runs_a_lease_token(pg_url: str) -> None:
    """A database at migration 10 (before fencing) with a leased run is upgraded: the run
    reads with token 0 and its next claim fences the older holder."""
    from psycopg.conninfo import make_conninfo

    from plait.adapters.stores.postgres import sql as _pg_sql
    from plait.adapters.stores.postgres.schema import LATEST, MIGRATIONS
    from plait.adapters.stores.shared.rows import run_data
    from plait.domain.errors import LeaseLostError
    from tests.contract.builders import new_run

    name = "plait_migration_10"
    with psycopg.connect(pg_url, autocommit=True) as admin:
        admin.execute(f"DROP DATABASE IF EXISTS {name}")
        admin.execute(f"CREATE DATABASE {name}")
    url = make_conninfo(pg_url, dbname=name)
    try:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(_pg_sql.CREATE_SCHEMA_TABLE)
            for version, statements in enumerate(MIGRATIONS[:10], 1):
                for statement in statements:
                    conn.execute(statement)
                conn.execute(_pg_sql.RECORD_VERSION, (version,))
            conn.execute(
                "INSERT INTO sessions (id, created_at, active_run_id) VALUES ('s1', 1.0, 'r1')"
            )
            data = run_data(new_run())  # as migration 10 stored it: no token
            conn.execute(
                "INSERT INTO runs (id, session_id, status, started_at, lease_owner, "
                "lease_expires_at, data) VALUES ('r1', 's1', 'running', 1.0, 'w1', 2000.0, %s)",
                (data,),
            )

        async def go() -> None:
            store = PostgresStore(url)
            try:
                assert await store.upgrade() == (10, LATEST)
                assert (await store.get_run("r1")).lease_token == 0
                claimed = await store.claim_run("r1", owner="w2", now=3_000.0, expires_at=4e3)
                assert claimed.lease_token == 1
                with pytest.raises(LeaseLostError):
                    await store.commit(
                        Commit(
                            session_id="s1", expected_version=0, messages=(user("m1"),),
                            lease_owner="w1", lease_token=0, lease_run_id="r1",
                        )
                    )  # fmt: skip
                assert await store.read_messages("s1") == []
            finally:
                await store.close()

        asyncio.run(go())
    finally:
        with psycopg.connect(pg_url, autocommit=True) as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
