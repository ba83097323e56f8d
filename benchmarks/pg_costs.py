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
- ``step_commit``: a worker's step commit as the service makes it (``plait_commit_events``):
  one message fenced by its run's lease token, with that run's three pending events (a
  durable commit), the session growing as it goes.

It splits a run's cost by statement for docs/scaling.md: what removing one statement
per run, or one durable commit, saves.
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


async def _run(url: str, n: int) -> dict[str, Any]:
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

        out["claim"] = await _measure(backend, n, claim)
        out["claim_empty"] = await _measure(backend, n, claim_empty)
        out["context_read"] = await _measure(backend, n, context_read)
        out["message_commit"] = await _measure(backend, n, message_commit)
        out["event_write"] = await _measure(backend, n, event_write)
        out["step_commit"] = await _measure(backend, n, step_commit)
    finally:
        await conn.close()
        await store.close()
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=2000)
    a = p.parse_args()
    from plait.testing.postgres import temporary_cluster

    with temporary_cluster(fsync=True) as url:
        report = asyncio.run(_run(url, a.n))
    report["load_avg_1m"] = round(os.getloadavg()[0], 2)
    print(json.dumps(report))


if __name__ == "__main__":
    main()
