"""PostgreSQL statements on the hot path of service mode keep their plans: the event write
is planned once per connection (not at every write), and a commit does not call a SQL
function that PL/pgSQL would plan again in every transaction."""

from __future__ import annotations

import asyncio

import psycopg
import pytest

from plait.adapters.stores.postgres.commit import apply
from plait.adapters.stores.postgres.store import PostgresStore
from plait.application.ports import Commit
from plait.domain.service import EventType, NewRunEvent
from tests.contract.builders import new_session, user
from tests.pg import empty_database


@pytest.fixture
def url(pg_url: str) -> str:
    empty_database(pg_url)
    return pg_url


def test_the_event_write_keeps_its_generic_plan(url: str) -> None:
    async def main() -> tuple[int, int]:
        store = PostgresStore(url, min_size=1, max_size=1)  # one connection: one cache
        try:
            for i in range(20):
                event = NewRunEvent(type=EventType.STEP_STARTED, at=1.0, data={"step": i})
                await store.append_run_events_batch({"r1": [event], "r2": [event, event]})
            row = await store._one(
                "SELECT generic_plans, custom_plans FROM pg_prepared_statements "
                "WHERE statement LIKE %s",
                ("%INSERT INTO run_events%",),
            )
            assert [e.seq for e in await store.read_run_events("r2")] == list(range(1, 41))
        finally:
            await store.close()
        assert row is not None, "the event write was never prepared"
        return int(row[0]), int(row[1])

    generic, custom = asyncio.run(main())
    # The server tries a plan for the values five times, then keeps the generic one.
    assert custom <= 5
    assert generic >= 5


def test_a_commit_does_not_call_plait_version(url: str) -> None:
    async def main() -> tuple[int, int]:
        store = PostgresStore(url)
        try:
            await store.create_session(new_session("s1"))
        finally:
            await store.close()
        async with await psycopg.AsyncConnection.connect(url) as conn:
            await conn.execute("SET track_functions = 'all'")
            commit = Commit(session_id="s1", expected_version=0, messages=(user("m1"),))
            result, _ = await apply(conn, commit, start=False)
            assert result.version == 1
            row = await (
                await conn.execute(
                    "SELECT coalesce(pg_stat_get_xact_function_calls('plait_commit'::regproc), 0),"
                    " coalesce(pg_stat_get_xact_function_calls('plait_version'::regproc), 0)"
                )
            ).fetchone()
            await conn.rollback()
        assert row is not None
        return int(row[0]), int(row[1])

    commits, versions = asyncio.run(main())
    assert commits == 1  # the counting works
    assert versions == 0


_BIG_TABLES = ("runs", "messages", "session_messages", "run_events", "executions", "sessions")


def test_a_workers_statements_planned_on_empty_tables_look_rows_up_by_key(url: str) -> None:
    """A worker warms its connections while a new database is nearly empty, and PL/pgSQL
    keeps the plans made then: none of them may read a whole table that grows with every
    run (a step commit's event fencing was a hash join over ``runs``, a claim's history
    one over ``messages``, a branch's members one over ``session_messages``)."""
    from plait.adapters.stores.postgres.warm import warm

    async def main() -> list[str]:
        async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
            try:
                await conn.execute("LOAD 'auto_explain'")
            except psycopg.Error as e:
                pytest.skip(f"auto_explain cannot be loaded here: {e}")
            plans: list[str] = []
            conn.add_notice_handler(lambda d: plans.append(d.message_primary or ""))
            await warm(conn)  # past the five custom plans: the generic ones are kept
            for setting in (
                "auto_explain.log_min_duration = 0",
                "auto_explain.log_nested_statements = on",
                "auto_explain.log_level = 'notice'",
            ):
                await conn.execute(f"SET {setting}")
            plans.clear()
            await warm(conn, rounds=1)
            return plans

    plans = asyncio.run(main())
    assert any("plait_claim" in p or "FROM sessions AS s" in p for p in plans)  # explained
    assert any("fenced AS" in p for p in plans)
    scans = sorted(
        {f"Seq Scan on {t} " for t in _BIG_TABLES for p in plans if f"Seq Scan on {t} " in p}
    )
    assert scans == []


def _generic_plan(url: str, sql: str, args: tuple[str, ...]) -> str:
    """The plan the server keeps for ``sql`` (``%s`` placeholders) once it goes generic,
    with every estimate in favour of joins over whole tables (nested loops priced out):
    a lookup by key must be the only plan the statement can have."""
    numbered = sql
    for i in range(1, sql.count("%s") + 1):
        numbered = numbered.replace("%s", f"${i}", 1)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SET plan_cache_mode = force_generic_plan")
        conn.execute("SET enable_nestloop = off")
        conn.execute(f"PREPARE kept AS {numbered}")
        literals = ", ".join(f"'{a}'" for a in args)
        rows = conn.execute(f"EXPLAIN EXECUTE kept({literals})").fetchall()
    return "\n".join(r[0] for r in rows)


def test_a_sessions_token_counts_are_read_by_key(url: str) -> None:
    """Planned on a small table, a join read every session's counts for each member."""
    from plait.adapters.stores.postgres import tokens

    plan = _generic_plan(url, tokens._READ, ("s1", "meter"))
    assert "Index Scan using message_tokens_pkey" in plan, plan
    assert "Seq Scan on message_tokens" not in plan, plan


def test_a_sessions_expiry_records_are_read_by_key(url: str) -> None:
    """Planned on a small table, a hash join read every session's records; now nothing is
    looked up while no message expired anywhere, else each member's record by its key."""
    from plait.adapters.stores.postgres import retention

    plan = _generic_plan(url, retention._READ, ("s1",))
    assert "Index Scan using message_expiries_pkey" in plan, plan
    assert "Hash" not in plan, plan
    assert "One-Time Filter" in plan, plan
