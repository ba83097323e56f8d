"""The service's floor (not a timed test): the durable writes of ``svc_load.py``'s runs made
by a bare loop, on the same kind of throw-away PostgreSQL cluster, on this machine now.

    uv run python benchmarks/svc_floor.py --runs 1000 --rate 200 --concurrency 8

W1's floor is a bare loop doing W1's durable writes; this is the same for the service
target (issue 27 item 5: 200 runs/s of three steps, step p99 <= 20 ms, on this 2-core
machine): one process, no HTTP, no framework, plain SQL, that makes per run what a run
of ``svc_load.py`` makes durable, one transaction (one round trip, pipelined) per durable
point, as few and as cheap as a hand-written client would:

1. the submission: the user's message, the queued run, the session's active run;
2. the claim: the oldest queued run set running (``FOR UPDATE SKIP LOCKED``) and the
   session's history read, in one statement;
3. three steps: the assistant's message (a tool call, then another, then the answer), the
   tool's result before it from the second step on, the run's row updated (its usage;
   ended at the third, the session's active run cleared), and the step's 6 events.

That is 6 messages, 18 events (~200 bytes of JSON each), a run inserted and updated 4
times and the session updated twice per run, in 5 durable transactions, against plait's
~5.8 (``svc_load.py`` also writes execution records and membership rows, fences each
write with the run's lease and makes a killed worker's runs recoverable; none of that is
here). The tool does nothing. Submissions come on a schedule (``--rate``, an open loop, as
``svc_load.py --rate``), ``--concurrency`` runs are driven at once (each on its own
connection, woken by the submitter instead of polling), and nothing is killed.

Figures: ``runs_per_s`` (runs / (last run's end - first submission)); ``step_latency_ms``
p50/p99 (from the claim's or the previous step's durable point to this step's, the tool
included); ``cpu_ms_per_run`` of this process and of every PostgreSQL process over the
same window, and their sum (the floor of ``svc_load.py``'s ``cpu_ms_per_run_total``,
which adds the API, the workers and its driver); ``transactions_per_run``;
``wal_bytes_per_run`` and ``wal_syncs_per_run``. Checked at the end (exit status 1 if
not): every run completed and every session holds its 6 messages.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from svc_load import (  # the same throw-away cluster and meters as the service's test
    _cluster_pids,
    _cpu_seconds,
    _ms,
    _pg_data_dir,
    _pg_wal,
    _pg_xacts,
    _store,
    count_between,
)

SCHEMA = """
CREATE TABLE f_sessions (id text PRIMARY KEY, active_run text);
CREATE TABLE f_messages (id bigserial PRIMARY KEY, session_id text NOT NULL, data text NOT NULL);
CREATE INDEX f_messages_by_session ON f_messages (session_id, id);
CREATE TABLE f_runs (
    id text PRIMARY KEY, session_id text NOT NULL, status text NOT NULL, owner text,
    data text NOT NULL);
CREATE INDEX f_runs_queued ON f_runs (id) WHERE status = 'queued';
CREATE TABLE f_events (
    run_id text NOT NULL, seq integer NOT NULL, data text NOT NULL, PRIMARY KEY (run_id, seq));
"""

CLAIM = """
WITH claimed AS (
    UPDATE f_runs SET status = 'running', owner = %s
    WHERE id = (SELECT id FROM f_runs WHERE status = 'queued' ORDER BY id
                LIMIT 1 FOR UPDATE SKIP LOCKED)
    RETURNING id, session_id)
SELECT c.id, c.session_id, m.data
FROM claimed AS c LEFT JOIN f_messages AS m ON m.session_id = c.session_id ORDER BY m.id
"""

INSERT_MESSAGE = "INSERT INTO f_messages (session_id, data) VALUES (%s, %s)"
EVENTS_PER_STEP = 6


def _message(kind: str, step: int, text: str) -> str:
    return json.dumps({"kind": kind, "step": step, "text": text, "at": time.time()})


def _event(run: str, step: int) -> str:
    return json.dumps(
        {"type": "event", "run_id": run, "step": step, "at": time.time(), "data": {"x": "y" * 120}}
    )


class Floor:
    def __init__(self, runs: int) -> None:
        self.runs = runs
        self.queued = asyncio.Condition()
        self.pending = 0
        self.ended: list[float] = []
        self.steps: list[float] = []

    async def submit(self, conn: Any, sid: str, i: int) -> None:
        run = f"run_{i:06d}"
        async with conn.transaction(), conn.pipeline():
            await conn.execute(
                INSERT_MESSAGE,
                (sid, _message("user", 0, "go")),
            )
            await conn.execute(
                "INSERT INTO f_runs (id, session_id, status, data) VALUES (%s, %s, 'queued', '{}')",
                (run, sid),
            )
            await conn.execute("UPDATE f_sessions SET active_run = %s WHERE id = %s", (run, sid))
        async with self.queued:
            self.pending += 1
            self.queued.notify()

    async def drive(self, conn: Any, name: str) -> None:
        while len(self.ended) < self.runs:
            async with self.queued:
                while self.pending == 0:
                    if len(self.ended) >= self.runs:
                        return
                    await self.queued.wait()
                self.pending -= 1
            async with conn.transaction():
                rows = await (await conn.execute(CLAIM, (name,), prepare=True)).fetchall()
            if not rows:  # another driver took it meanwhile (cannot happen: one each)
                raise SystemExit("a claim found no queued run")
            run, sid = rows[0][0], rows[0][1]
            last = time.time()
            for step in (1, 2, 3):
                async with conn.transaction(), conn.pipeline():
                    if step > 1:  # the tool's result, then the next assistant message
                        await conn.execute(
                            INSERT_MESSAGE,
                            (sid, _message("tool_result", step - 1, "ok " * 8)),
                            prepare=True,
                        )
                    kind = "answer" if step == 3 else "tool_call"
                    await conn.execute(
                        INSERT_MESSAGE,
                        (sid, _message(kind, step, '{"name": "echo", "args": {}}')),
                        prepare=True,
                    )
                    usage = json.dumps({"steps": step, "tokens": 100 * step})
                    if step < 3:
                        await conn.execute(
                            "UPDATE f_runs SET data = %s WHERE id = %s",
                            (usage, run),
                            prepare=True,
                        )
                    else:
                        await conn.execute(
                            "UPDATE f_runs SET status = 'completed', owner = NULL, data = %s "
                            "WHERE id = %s",
                            (usage, run),
                            prepare=True,
                        )
                        await conn.execute(
                            "UPDATE f_sessions SET active_run = NULL WHERE id = %s",
                            (sid,),
                            prepare=True,
                        )
                    first = (step - 1) * EVENTS_PER_STEP
                    await conn.execute(
                        "INSERT INTO f_events (run_id, seq, data) "
                        "SELECT %s, s, d FROM unnest(%s::int[], %s::text[]) AS e(s, d)",
                        (
                            run,
                            list(range(first + 1, first + EVENTS_PER_STEP + 1)),
                            [_event(run, step) for _ in range(EVENTS_PER_STEP)],
                        ),
                        prepare=True,
                    )
                now = time.time()
                self.steps.append(now - last)
                last = now
            self.ended.append(last)
            if len(self.ended) >= self.runs:
                async with self.queued:
                    self.queued.notify_all()


async def _main(a: argparse.Namespace, db: str) -> dict[str, Any]:
    import psycopg

    async with await psycopg.AsyncConnection.connect(db, autocommit=True) as conn:
        await conn.execute(SCHEMA)
        sids = [f"ses_{i:06d}" for i in range(a.runs)]
        async with conn.cursor() as cur:
            await cur.executemany("INSERT INTO f_sessions (id) VALUES (%s)", [(s,) for s in sids])
    floor = Floor(a.runs)
    conns = [await psycopg.AsyncConnection.connect(db) for _ in range(a.concurrency + 1)]
    submitter, drivers = conns[0], conns[1:]
    pg_dir = await _pg_data_dir(db)
    xacts, wal = await _pg_xacts(db), await _pg_wal(db)
    pids = [os.getpid(), *_cluster_pids(pg_dir)]
    base = {p: _cpu_seconds(p) for p in pids}
    t0 = time.time()

    async def submit_all() -> None:
        for i, sid in enumerate(sids):
            await asyncio.sleep(max(0.0, t0 + i / a.rate - time.time()))
            await floor.submit(submitter, sid, i)

    tasks = [asyncio.ensure_future(floor.drive(c, f"driver{n}")) for n, c in enumerate(drivers)]
    await submit_all()
    await asyncio.gather(*tasks)
    elapsed = max(floor.ended) - t0
    spent = {p: _cpu_seconds(p) - base[p] for p in pids}
    for pid in _cluster_pids(pg_dir):  # backends opened meanwhile: none (connected before)
        if pid not in spent:
            spent[pid] = _cpu_seconds(pid)
    lsn_after = (await _pg_wal(db))["lsn"]
    for c in conns:
        await c.close()  # a backend reports its transactions as it ends, at the latest
    await asyncio.sleep(0.5)
    xacts_after, wal_after = await _pg_xacts(db), await _pg_wal(db)
    client = spent.pop(os.getpid())
    server = sum(spent.values())
    async with await psycopg.AsyncConnection.connect(db, autocommit=True) as conn:
        statuses: dict[str, int] = dict(
            await (await conn.execute("SELECT status, count(*) FROM f_runs GROUP BY 1")).fetchall()
        )
        counts = await (
            await conn.execute(
                "SELECT count(*) FILTER (WHERE n <> 6) FROM "
                "(SELECT count(*) AS n FROM f_messages GROUP BY session_id) AS x"
            )
        ).fetchone()
    assert counts is not None
    ok = statuses == {"completed": a.runs} and counts[0] == 0
    return {
        "floor": "bare loop, same durable writes",
        "runs": a.runs,
        "rate": a.rate,
        "concurrency": a.concurrency,
        "runs_per_s": round(a.runs / elapsed, 1),
        "step_latency_ms_p50": _ms(floor.steps, 0.5),
        "step_latency_ms_p99": _ms(floor.steps, 0.99),
        "cpu_ms_per_run": {
            "client": round(1000 * client / a.runs, 2),
            "postgresql": round(1000 * server / a.runs, 2),
        },
        "cpu_ms_per_run_total": round(1000 * (client + server) / a.runs, 2),
        "transactions_per_run": round((xacts_after - xacts) / a.runs, 2),
        "wal_bytes_per_run": round((lsn_after - wal["lsn"]) / a.runs),
        "wal_syncs_per_run": round((wal_after["syncs"] - wal["syncs"]) / a.runs, 2),
        "load_avg_1m": round(os.getloadavg()[0], 2),
        "statuses": statuses,
        "sessions_without_6_messages": counts[0],
        "ok": ok,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=count_between(2, 20000), default=1000, metavar="2..20000")
    p.add_argument("--rate", type=float, default=200.0, help="submissions per second")
    p.add_argument("--concurrency", type=int, default=8, help="runs driven at once")
    a = p.parse_args()
    if a.rate <= 0:
        p.error(f"--rate must be a positive number of runs per second, not {a.rate}")
    if a.concurrency < 1:
        p.error(f"--concurrency must be at least 1, not {a.concurrency}")
    with (
        tempfile.TemporaryDirectory(prefix="plait-floor-") as tmp,
        _store("postgresql", Path(tmp), pg_stats=False) as db,
    ):
        try:
            import uvloop

            report = uvloop.run(_main(a, db))
        except ImportError:  # pragma: no cover - uvloop is a dependency where it builds
            report = asyncio.run(_main(a, db))
    print(json.dumps(report))
    if not report["ok"]:
        raise SystemExit("checks failed: a run did not complete or a session lacks messages")


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        main()
