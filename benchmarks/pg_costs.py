"""CPU per statement on PostgreSQL, client and server (not a timed test; prints figures).

    uv run python benchmarks/pg_costs.py [--n 2000]

One connection of the store's kind (psycopg 3, async, autocommit) to a throw-away
cluster with fsync on; each statement kind runs ``--n`` times in a row, and the figures
are the CPU time (user + system) the client process and the server backend serving it
spent per statement: a measure that holds on a busy machine, where wall-clock time does
not. Kinds:

- ``round_trip``: ``SELECT 1``, the floor of any statement;
- ``context_read``: the read each step's context makes of the active summary and the
  constraints (the store's own method, its cache bypassed);
- ``durable_commit``: a transaction that writes a commit record (``txid_current()``) and
  waits for its fsync, nothing else;
- ``event_write``: the store's write of one run's three events (one statement that
  numbers, inserts and notifies; a durable commit);
- ``message_commit``: the store's commit of one user message to a session (one call of
  ``plait_commit``, a durable commit), the session growing as it goes;
- ``claim``: a worker's claim of a queued run (``plait_claim``: the run set running,
  its session and history read; a durable commit), the runs submitted beforehand;
- ``claim_empty``: the same on an empty queue (what an idle worker polls with).
- ``session_create``: the store's write of a new session (one ``INSERT``, a durable
  commit);
- ``lease_renew``: a worker's renewal of its run's lease, fenced by its token (one
  ``UPDATE``, a durable commit).
- ``step_commit``: a worker's step commit as the service makes it (``plait_commit_events``):
  one message fenced by its run's lease token, with that run's three pending events (a
  durable commit), the session growing as it goes.

It splits a run's cost by statement for docs/scaling.md: what removing one statement
per run, or one durable commit, saves.

``--nested`` also splits the step commit by the statements run inside
``plait_commit_events`` (``pg_stat_statements`` with ``track = all``: the server's time
in each, per call of the function); the remainder is what the function spends outside
their execution (binding its 35 arguments, setting up and ending each statement's
executor, PL/pgSQL's own work).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any


def _cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def _measure(backend: int, n: int, once: Callable[[int], Awaitable[Any]]) -> dict[str, float]:
    for i in range(20):  # warm up: plans prepared, caches filled
        await once(-1 - i)
    client0, server0, wall0 = time.process_time(), _cpu(backend), time.perf_counter()
    for i in range(n):
        await once(i)
    client, server = time.process_time() - client0, _cpu(backend) - server0
    wall = time.perf_counter() - wall0
    return {
        "client_us": round(1e6 * client / n, 1),
        "server_us": round(1e6 * server / n, 1),
        "wall_us": round(1e6 * wall / n, 1),
    }


async def _run(url: str, n: int, nested: bool = False) -> dict[str, Any]:
    import psycopg

    from plait.adapters.stores.postgres.commit import apply_with_events
    from plait.adapters.stores.postgres.store import PostgresStore
    from plait.adapters.system import RandomIds, SystemClock
    from plait.application.ports import CarriedEvents, Commit
    from plait.domain.messages import UserMessage
    from plait.domain.service import EventType, NewRunEvent
    from plait.domain.session import Session
    from plait.runtime import Runtime

    store = PostgresStore(url, min_size=1, max_size=1)
    ids, clock = RandomIds(), SystemClock()
    session = Session(id=ids.new("ses"), created_at=clock.now())
    await store.create_session(session)
    conn = await psycopg.AsyncConnection.connect(url, autocommit=True)
    out: dict[str, Any] = {"n": n}
    try:
        row = await (await conn.execute("SELECT pg_backend_pid()")).fetchone()
        assert row is not None
        raw_backend = int(row[0])

        async def round_trip(_: int) -> None:
            await (await conn.execute("SELECT 1")).fetchone()

        async def durable_commit(_: int) -> None:
            await (await conn.execute("SELECT txid_current()")).fetchone()

        out["round_trip"] = await _measure(raw_backend, n, round_trip)
        out["durable_commit"] = await _measure(raw_backend, n, durable_commit)

        # The store's one pooled connection: its backend is the newest one of this user.
        pool_pid = await store._one("SELECT pg_backend_pid()", ())
        assert pool_pid is not None
        backend = int(pool_pid[0])

        async def context_read(_: int) -> None:
            store._contexts.forget(session.id)  # the read itself, not the cache
            await store.summary_and_constraints(session.id)

        async def event_write(i: int) -> None:
            run_id = f"run_{i}"
            events = [
                NewRunEvent(type=EventType.STEP_STARTED, at=clock.now(), data={"step": k})
                for k in range(3)
            ]
            await store.append_run_events_batch({run_id: events})

        version = [0]

        async def message_commit(_: int) -> None:
            message = UserMessage(id=ids.new("msg"), text="hello", created_at=clock.now())
            commit = Commit(session_id=session.id, expected_version=version[0], messages=(message,))
            version[0] = (await store.commit(commit)).version

        runtime = Runtime(store=store, artifacts=store, model=None, tools=[], clock=clock, ids=ids)
        for _ in range(n + 21):  # one queued run per session, claimed below (one for the steps)
            queued = await runtime.service.create_session()
            await runtime.service.submit(queued.id, "go")

        async def claim(_: int) -> None:
            now = clock.now()
            found = await store.claim_and_start_run(
                owner="bench", now=now, expires_at=now + 30, model="m", model_spec=None
            )
            assert found is not None

        async def claim_empty(_: int) -> None:
            now = clock.now()
            found = await store.claim_and_start_run(
                owner="bench", now=now, expires_at=now + 30, model="m", model_spec=None
            )
            assert found is None

        stepping = await store.claim_and_start_run(
            owner="bench", now=clock.now(), expires_at=clock.now() + 3600, model="m",
            model_spec=None,
        )  # fmt: skip
        assert stepping is not None
        step_run = stepping.run
        step_version = [max((m.seq for m in stepping.history), default=0)]

        async def step_commit(_: int) -> None:
            message = UserMessage(id=ids.new("msg"), text="a step", created_at=clock.now())
            commit = Commit(
                session_id=step_run.session_id,
                expected_version=step_version[0],
                messages=(message,),
                lease_token=step_run.lease_token,
                lease_run_id=step_run.id,
            )
            events = tuple(
                NewRunEvent(type=EventType.STEP_STARTED, at=clock.now(), data={"step": k})
                for k in range(3)
            )
            carried = CarriedEvents({step_run.id: events}, {step_run.id: step_run.lease_token})
            applied = await store._read(
                lambda conn: apply_with_events(conn, commit, carried, start=False)
            )
            step_version[0] = applied[0].version

        async def session_create(_: int) -> None:
            await store.create_session(Session(id=ids.new("ses"), created_at=clock.now()))

        async def lease_renew(i: int) -> None:
            await store.renew_lease(
                step_run.id,
                owner="bench",
                expires_at=clock.now() + 3600 + i,
                lease_token=step_run.lease_token,
            )

        out["session_create"] = await _measure(backend, n, session_create)
        out["lease_renew"] = await _measure(backend, n, lease_renew)
        out["claim"] = await _measure(backend, n, claim)
        out["claim_empty"] = await _measure(backend, n, claim_empty)
        out["context_read"] = await _measure(backend, n, context_read)
        out["message_commit"] = await _measure(backend, n, message_commit)
        out["event_write"] = await _measure(backend, n, event_write)
        if nested:
            await conn.execute("SELECT pg_stat_statements_reset()")
        out["step_commit"] = await _measure(backend, n, step_commit)
        if nested:
            out["step_commit_nested"] = await _nested(conn)
    finally:
        await conn.close()
        await store.close()
    return out


_FUNCTION = "plait_commit_events("


async def _nested(conn: Any) -> dict[str, Any]:
    """The server's time per call of the step commit's function, in all and in each
    statement it ran (the statements run more than once a call, such as the message
    loop's, are summed per call), and what is left: the function's own work."""
    rows = await (
        await conn.execute(
            "SELECT calls, total_exec_time, query FROM pg_stat_statements "
            "WHERE toplevel = false OR query LIKE %s ORDER BY total_exec_time DESC",
            (f"%{_FUNCTION}%",),
        )
    ).fetchall()
    calls = next((int(c) for c, _, q in rows if _FUNCTION in q), 0)
    if not calls:
        return {}
    total = next(1000 * t / calls for c, t, q in rows if _FUNCTION in q)
    inside = {
        " ".join(q.split())[:90]: round(1000 * t / calls, 1)
        for c, t, q in rows
        if _FUNCTION not in q and int(c) >= calls
    }
    return {
        "function_us": round(total, 1),
        "statements_us": inside,
        "outside_statements_us": round(total - sum(inside.values()), 1),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=2000)
    p.add_argument("--nested", action="store_true", help="split the step commit by its statements")
    a = p.parse_args()
    from plait.testing.postgres import temporary_cluster

    settings = (
        ["shared_preload_libraries=pg_stat_statements", "pg_stat_statements.track=all"]
        if a.nested
        else []
    )
    with temporary_cluster(fsync=True, settings=settings) as url:
        if a.nested:
            import psycopg

            with psycopg.connect(url, autocommit=True) as conn:
                conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        report = asyncio.run(_run(url, a.n, a.nested))
    report["load_avg_1m"] = round(os.getloadavg()[0], 2)
    print(json.dumps(report))


if __name__ == "__main__":
    main()
