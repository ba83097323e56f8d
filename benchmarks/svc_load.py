"""Service load test (not a timed test): runs through the HTTP API, workers on a shared store.

    uv run python benchmarks/svc_load.py --store postgresql --runs 500 --workers 4
    uv run python benchmarks/svc_load.py --store sqlite --runs 500
    (--pg-stats also counts the SQL statements per run with pg_stat_statements, with the
    WAL each wrote, and the rows each table got; --waits samples what the database's
    busy backends wait for; --workers 1..8 for the scaling series of docs/scaling.md)

PostgreSQL: starts a throw-away cluster (fsync, synchronous_commit and full_page_writes
on: every acknowledged write is durable), an API process (no in-process worker) and
``--workers`` worker processes driving ``--concurrency`` runs each; submits ``--runs``
runs concurrently (one session each, through a pool of 64 keep-alive connections) and
SIGKILLs worker 0 once half of the runs have ended. SQLite: one process serving the API
with an in-process worker (SQLite does its I/O on its own thread); nothing is killed.
The driver shares the machine's cores with the service: it uses a minimal HTTP client
and learns progress from one count of the ended runs per 0.25 s, asked of PostgreSQL
directly (SQLite: one session listing), not from polling every run (the figures come
from the server's timestamps, not from when the driver noticed).

Each run is three steps with a deterministic function model (no network): two calls of an
idempotent tool, then an answer. The tool itself keeps the ledger the checks use (not the
store's view): every attempt is appended to ``attempts.log`` with the worker's pid, and
its effect is applied at most once per idempotency key (a file created with O_EXCL).
The ledger lives on a memory file system where there is one (``/dev/shm``): on the disk
that PostgreSQL fsyncs to, creating its files cost about 0.5 ms of kernel CPU per run
(ext4 inode allocation), a cost of the checks' bookkeeping, not of the service.

Checked at the end (exit status 1 if any fails): every run terminal and ``completed``;
each session holds exactly its 6 messages in order with distinct ids (no message lost or
duplicated); every tool call's effect applied exactly once; a call attempted twice only if
its first attempt was in the killed worker (recovery re-executes an idempotent call with
the same key, DESIGN §4), reported as ``tool_calls_reattempted_after_kill``.

Figures:
- ``runs_per_s``: runs / (last run's ``ended_at`` - first submission), server timestamps.
- ``step_latency_ms`` p50/p99: per run, the time between consecutive ``step_started``
  events and from the last one to ``run_finished``, from the persisted events' ``at``
  (the worker's clock). One step is: the model call, persisting the assistant message,
  recording the tool call's start, running the tool, persisting its result, as the
  worker lives it under the load (waits for the store, the event loop and the CPU
  included); the wait in the queue before a worker claims the run is not a step.
- ``step_latency_ms_p99_after_submit``: the same, of the steps that began once every run
  was submitted (the API no longer takes its share of the cores).
- ``step_latency_ms_p99_first_second`` / ``..._after_first_second``: the same, of the
  steps that began in the first second after the first submission (every process serving
  its first requests) and of those that began later.
- ``run_latency_ms`` p50/p99: ``ended_at - started_at`` (submission to end, queue
  included) - with 500 runs submitted at once this mostly measures the backlog.
- ``sse_delivery_ms`` p50/p99: for ``--watch`` runs followed live over SSE from the API
  process, receive time minus the event's ``at`` (written by another process).
- ``cpu_ms_per_run``: CPU (user + system) each process spent from the first submission to
  the last run's end, per run: the driver, the API process, the workers summed and every
  PostgreSQL process (backends opened meanwhile included; a killed worker counts what it
  had spent when last sampled). ``transactions_per_run``: ``pg_stat_database`` commits
  and rollbacks over the same window (each autocommit statement counts as one).
  ``cpu_ms_per_run_by_worker``: the same, per worker process.
- ``wal_bytes_per_run``: the WAL written over the same window (``pg_current_wal_lsn``);
  ``wal_records_per_run``, ``wal_fpi_per_run`` (full-page images) and
  ``wal_syncs_per_run`` (WAL fsyncs: durable points, several commits may share one)
  from ``pg_stat_wal``, read once the clients have gone.
- ``--waits``: ``waits``, the share of busy-backend samples per wait event
  (``LWLock:WALWrite``/``IO:WALSync``: waiting for a commit's flush; ``Lock:*``: a
  heavyweight lock; ``CPU``: none) and per statement, and lock requests waiting.
- ``--no-fsync``: a cluster that does not fsync, to split the cost of durability off
  (never a figure of the service).
- ``--pg-setting NAME=VALUE`` (repeatable): a server setting of the throw-away cluster,
  e.g. group commit (``commit_delay=100 --pg-setting commit_siblings=2``); reported as
  ``pg_settings``.
- ``--no-kill``: nothing is killed (the figure without the killed worker's lease tail).
- ``--rate R``: submissions on a schedule, one every 1/R s whatever the answers so far (an
  open-loop arrival rate: what "sustains R runs/s" means), while the runs end and worker
  0 is killed halfway; without it every run is submitted at once (a burst that queues
  most of them). ``runs_per_s`` is then at most R; ``run_latency_ms`` shows whether the
  service kept up (a queue that grows shows there).
- ``--warmup N`` (PostgreSQL): N runs in sessions of their own served first, not
  measured (their tool calls are checked with the rest): the figures of processes that
  have served before, not of their first requests.
- ``SVC_LOAD_PROFILE=DIR``: each worker writes a CPU-time cProfile to ``DIR``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncGenerator, Awaitable, Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve()


# --- the agent the workers run ----------------------------------------------------------------


def _runtime(db: str, ledger: Path, *, with_model: bool, lease: float) -> Any:
    from plait.adapters.stores import open_store
    from plait.adapters.system import RandomIds, SystemClock
    from plait.application.ports import (
        ModelRequest,
        ModelResponse,
        RawToolCall,
        Tool,
        ToolInvocation,
        ToolOutput,
    )
    from plait.domain.messages import AssistantMessage
    from plait.domain.tools import EffectClass, ToolSpec
    from plait.runtime import Runtime
    from plait.testing import FunctionModel

    def model(request: ModelRequest) -> ModelResponse:
        calls = sum(1 for m in request.context.items if isinstance(m, AssistantMessage))
        if calls < 2:
            n = len(request.context.items)
            call = RawToolCall(id=f"c{n}", name="mark", arguments={"n": calls})
            return ModelResponse(text="", tool_calls=(call,))
        return ModelResponse(text="done")

    async def mark(invocation: ToolInvocation) -> ToolOutput:
        inv = invocation
        with (ledger / "attempts.log").open("a") as f:
            f.write(f"{os.getpid()} {inv.idempotency_key}\n")
        try:
            fd = os.open(ledger / inv.idempotency_key, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            os.close(fd)
        except FileExistsError:
            pass  # applied before this attempt: idempotent
        return ToolOutput(content="ok")

    spec = ToolSpec(
        name="mark",
        description="Record a mark.",
        parameters={"type": "object", "properties": {"n": {"type": "integer"}}},
        effect=EffectClass.IDEMPOTENT,
    )
    store: Any = open_store(db)  # SQLite: its calls run on its own I/O thread
    return Runtime(
        store=store,
        artifacts=store,
        model=FunctionModel(model, name="svc-load") if with_model else None,
        tools=[Tool(spec=spec, execute=mark)],
        clock=SystemClock(),
        ids=RandomIds(),
        lease_seconds=lease,
    )


def _settings(db: str, **kw: Any) -> Any:
    from plait.entrypoints.http.server import Settings

    return Settings(db=db, log_level="warning", **kw)


def serve_main(db: str, port: int, ledger: Path, in_process: int, lease: float) -> None:
    import uvicorn

    from plait.entrypoints.http.app import create_app
    from plait.entrypoints.http.server import (
        configure_logging,
        context_for,
        settle_start_up,
        uvicorn_config,
    )

    configure_logging("warning")
    rt = _runtime(db, ledger, with_model=in_process > 0, lease=lease)
    app = create_app(context_for(rt, _settings(db, serve_workers=in_process)))
    # As `plait serve` runs it (its HTTP protocol, loop and logging), with room for the
    # driver's pool: keep-alive connections held through the run, a deep accept backlog.
    config = uvicorn_config(app, host="127.0.0.1", port=port, keep_alive=120)
    config.backlog = 4096
    config.load()
    settle_start_up()
    uvicorn.Server(config).run()


def worker_main(db: str, ledger: Path, concurrency: int, lease: float) -> None:
    from plait.application.worker import Worker
    from plait.entrypoints.http.events import encode_event
    from plait.entrypoints.http.server import configure_logging, run_async, settle_start_up

    configure_logging("warning")

    async def go() -> None:
        rt = _runtime(db, ledger, with_model=True, lease=lease)
        worker = Worker(
            service=rt.service, queue=rt.store, encode=encode_event, concurrency=concurrency,
            poll_seconds=0.05,
        )  # fmt: skip
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGTERM, stop.set)
        settle_start_up()
        await worker.run(stop)
        await rt.close()

    run_async(go())  # as `plait worker` runs


# --- a light HTTP client ----------------------------------------------------------------------
# The driver shares the machine's cores with the service it measures; httpx costs about
# 3 ms of CPU per request here (and its pool slows down with hundreds of waiting requests),
# which made the driver itself the bottleneck. This client does HTTP/1.1 keep-alive with
# JSON bodies and chunked streams, nothing more.


class _Http:
    def __init__(self, port: int, key: str, size: int) -> None:
        self._port = port
        self._auth = f"Authorization: Bearer {key}\r\n"
        self._idle: asyncio.Queue[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = (
            asyncio.Queue()
        )
        self._size = size
        self._opened = 0

    async def _conn(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        if self._idle.empty() and self._opened < self._size:
            self._opened += 1
            try:
                return await asyncio.open_connection("127.0.0.1", self._port)
            except OSError:
                self._opened -= 1
                raise
        return await self._idle.get()

    def _head(self, method: str, path: str, body: bytes, extra: str = "") -> bytes:
        return (
            f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{self._auth}{extra}"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
        ).encode() + body

    async def request(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        data = b"" if body is None else json.dumps(body).encode()
        reader, writer = await self._conn()
        writer.write(self._head(method, path, data))
        status, headers = await _read_head(reader)
        raw = await reader.readexactly(int(headers.get("content-length", "0")))
        self._idle.put_nowait((reader, writer))
        return status, json.loads(raw) if raw else None

    async def stream(self, path: str) -> Any:
        """The SSE frames of ``path`` as (receive time, event dict), on its own connection."""
        reader, writer = await asyncio.open_connection("127.0.0.1", self._port)
        try:
            writer.write(self._head("GET", path, b""))
            status, _ = await _read_head(reader)
            if status != 200:
                raise SystemExit(f"GET {path}: HTTP {status}")
            buf = b""
            while size := int((await reader.readline()).strip() or b"0", 16):
                buf += await reader.readexactly(size)
                await reader.readexactly(2)
                *frames, buf = buf.split(b"\n\n")
                for frame in frames:
                    for line in frame.split(b"\n"):
                        if line.startswith(b"data:"):
                            yield time.time(), json.loads(line[5:])
        finally:
            writer.close()

    def close(self) -> None:
        while not self._idle.empty():
            self._idle.get_nowait()[1].close()


async def _read_head(reader: asyncio.StreamReader) -> tuple[int, dict[str, str]]:
    lines = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return int(lines[0].split()[1]), headers


# --- the driver -------------------------------------------------------------------------------


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


PYCACHE = Path(tempfile.gettempdir()) / "plait-bench-pycache"
"""Bytecode for the service's processes, kept between runs of this script: as an
installed package has (this machine sets PYTHONDONTWRITEBYTECODE, which would make a
module first imported while runs are measured, such as anyio's event-loop backend at the
API's first request, be compiled from source inside the measured window)."""


def _bytecode_env() -> dict[str, str]:
    """The service processes' environment: bytecode read from and written to
    :data:`PYCACHE`, which is first brought up to date for plait and what it imports."""
    import compileall

    sys.pycache_prefix = str(PYCACHE)  # where compileall writes, as the children read
    for entry in sys.path:
        if entry and Path(entry).is_dir() and not entry.startswith(sys.base_prefix):
            compileall.compile_dir(entry, quiet=2, workers=0)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = str(PYCACHE)
    return env


def _spawn(*args: str, env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, str(HERE), *args], env=env)


def _key(db: str) -> str:
    from plait.adapters.stores import open_store
    from plait.adapters.system import RandomIds, SystemClock
    from plait.domain.service import Role
    from plait.entrypoints.http.auth import create_key

    async def go() -> str:
        store: Any = open_store(db)
        try:
            _, secret = await create_key(
                store, principal="load", role=Role.USER, clock=SystemClock(), ids=RandomIds()
            )
            return secret
        finally:
            await store.close()

    return asyncio.run(go())


@contextlib.contextmanager
def _store(
    kind: str,
    tmp: Path,
    *,
    pg_stats: bool,
    fsync: bool = True,
    settings: Sequence[str] = (),
    socket: bool = False,
) -> Iterator[str]:
    if kind == "sqlite":
        yield f"sqlite:///{tmp / 'plait.db'}"
        return
    from plait.testing.postgres import temporary_cluster

    extra = ["shared_preload_libraries=pg_stat_statements"] if pg_stats else []
    extra += settings
    if not socket:
        with temporary_cluster(fsync=fsync, max_connections=200, settings=extra) as url:
            yield url
        return
    from plait.testing.postgres import cluster

    with cluster(fsync=fsync, max_connections=200, settings=extra) as running:
        # the cluster's Unix socket (created beside its data directory)
        yield f"postgresql://plait@/plait?host={running.data.parent / 'sock'}&port={running.port}"


async def _pg_stats_reset(db: str) -> None:
    import psycopg

    async with await psycopg.AsyncConnection.connect(db, autocommit=True) as conn:
        await conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        await conn.execute("SELECT pg_stat_statements_reset()")


async def _pg_data_dir(db: str) -> Path:
    import psycopg

    async with await psycopg.AsyncConnection.connect(db, autocommit=True) as conn:
        row = await (await conn.execute("SHOW data_directory")).fetchone()
    assert row is not None
    return Path(row[0])


def _cluster_pids(data_dir: Path) -> list[int]:
    """The cluster's processes: the postmaster and its children (backends included)."""
    postmaster = int((data_dir / "postmaster.pid").read_text().split()[0])
    children = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, IndexError, ValueError):
            if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == postmaster:
                children.append(int(stat.parent.name))
    return [postmaster, *children]


async def _pg_xacts(db: str) -> int:
    import psycopg

    async with await psycopg.AsyncConnection.connect(db, autocommit=True) as conn:
        row = await (
            await conn.execute(
                "SELECT xact_commit + xact_rollback FROM pg_stat_database "
                "WHERE datname = current_database()"
            )
        ).fetchone()
    assert row is not None
    return int(row[0])


async def _pg_tables(db: str) -> dict[str, tuple[int, ...]]:
    """Rows inserted, updated and updated in place (HOT: no index entry) per table, how
    many times autovacuum vacuumed and analyzed it, its sequential scans and the rows
    they read."""
    import psycopg

    async with await psycopg.AsyncConnection.connect(db, autocommit=True) as conn:
        rows = await (
            await conn.execute(
                "SELECT relname, n_tup_ins, n_tup_upd, n_tup_hot_upd, autovacuum_count, "
                "autoanalyze_count, seq_scan, seq_tup_read FROM pg_stat_user_tables"
            )
        ).fetchall()
    return {r[0]: tuple(int(n) for n in r[1:]) for r in rows}


async def _pg_wal(db: str) -> dict[str, int]:
    """The WAL position (bytes) and ``pg_stat_wal``'s counters: records, full-page images,
    bytes, writes and syncs (fsyncs of WAL: a commit's durable point)."""
    import psycopg

    async with await psycopg.AsyncConnection.connect(db, autocommit=True) as conn:
        row = await (
            await conn.execute(
                "SELECT (pg_current_wal_lsn() - '0/0'::pg_lsn)::bigint, wal_records, wal_fpi, "
                "wal_bytes::bigint, wal_write, wal_sync FROM pg_stat_wal"
            )
        ).fetchone()
    assert row is not None
    names = ("lsn", "records", "fpi", "bytes", "writes", "syncs")
    return {name: int(value) for name, value in zip(names, row, strict=True)}


class _WaitSampler:
    """``--waits``: what the database's busy backends are doing, sampled every 20 ms
    from ``pg_stat_activity`` while the load runs (a backend with no wait event is on the
    CPU or waiting for one), and how many lock requests wait (``pg_locks``). Shares per
    busy-backend sample, by wait event and by statement."""

    _ACTIVITY = (
        "SELECT coalesce(wait_event_type || ':' || wait_event, 'CPU'), "
        "left(regexp_replace(query, '\\s+', ' ', 'g'), 48) FROM pg_stat_activity "
        "WHERE datname = current_database() AND state = 'active' "
        "AND pid <> pg_backend_pid()"
    )
    _LOCKS = (
        "SELECT coalesce(relation::regclass::text, locktype), mode FROM pg_locks WHERE NOT granted"
    )

    def __init__(self) -> None:
        self.samples = 0
        self.busy = 0
        self.events: dict[str, int] = {}
        self.statements: dict[str, int] = {}
        self.lock_waits: dict[str, int] = {}

    async def run(self, db: str, stop: asyncio.Event) -> None:
        import psycopg

        async with await psycopg.AsyncConnection.connect(db, autocommit=True) as conn:
            while not stop.is_set():
                rows = await (await conn.execute(self._ACTIVITY)).fetchall()
                locks = await (await conn.execute(self._LOCKS)).fetchall()
                self.samples += 1
                self.busy += len(rows)
                for event, query in rows:
                    self.events[event] = self.events.get(event, 0) + 1
                    self.statements[query] = self.statements.get(query, 0) + 1
                for relation, mode in locks:
                    name = f"{relation} {mode}"
                    self.lock_waits[name] = self.lock_waits.get(name, 0) + 1
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), 0.02)

    def report(self) -> dict[str, Any]:
        def shares(counts: dict[str, int], total: int) -> dict[str, float]:
            top = sorted(counts.items(), key=lambda kv: -kv[1])[:10]
            return {k: round(v / max(total, 1), 3) for k, v in top}

        return {
            "samples": self.samples,
            "busy_backends_avg": round(self.busy / max(self.samples, 1), 2),
            "by_wait_event": shares(self.events, self.busy),
            "by_statement": shares(self.statements, self.busy),
            "lock_waits_avg": round(sum(self.lock_waits.values()) / max(self.samples, 1), 3),
            "lock_waits_by_relation": shares(self.lock_waits, self.samples),
        }


async def _pg_stats(db: str, runs: int) -> dict[str, Any]:
    """Statements executed per run since the reset (all processes), the top ones."""
    import psycopg

    async with await psycopg.AsyncConnection.connect(db, autocommit=True) as conn:
        rows = await (
            await conn.execute(
                "SELECT calls, total_exec_time, wal_bytes::bigint, query "
                "FROM pg_stat_statements WHERE toplevel "
                "AND query NOT LIKE '%pg_stat_statements%' ORDER BY calls DESC"
            )
        ).fetchall()
    total = sum(r[0] for r in rows)
    top = [
        {
            "per_run": round(c / runs, 2),
            "ms": round(t, 1),
            "wal_bytes_per_run": round(w / runs),
            "sql": " ".join(q.split())[:110],
        }
        for c, t, w, q in rows[:25]
    ]
    return {
        "statements_per_run": round(total / runs, 1),
        "top": top,
    }


class _CpuMeter:
    """CPU seconds each group of processes spent since :meth:`start`; sampled as the
    run goes (a killed process keeps what it had spent when last seen). The PostgreSQL
    group is found again at each sample: pools open backends while the load runs."""

    def __init__(self, groups: dict[str, list[int]], pg_dir: Path | None) -> None:
        self._groups = groups
        self._pg_dir = pg_dir
        if pg_dir is not None:
            groups["postgresql"] = _cluster_pids(pg_dir)
        self._base = {p: _cpu_seconds(p) for ps in groups.values() for p in ps}
        self._last = dict(self._base)
        self._roles: dict[int, str] = {}
        self._reaped = (
            _cpu_seconds(groups["postgresql"][0], reaped=True) if pg_dir is not None else 0.0
        )

    def sample(self) -> None:
        if self._pg_dir is not None:
            pids = self._groups["postgresql"]
            for pid in _cluster_pids(self._pg_dir):
                if pid not in self._base:
                    pids.append(pid)
                    self._base[pid] = self._last[pid] = 0.0
        for pid in self._last:
            self._last[pid] = max(self._last[pid], _cpu_seconds(pid))
            if pid not in self._roles and pid in self._groups.get("postgresql", ()):
                self._roles[pid] = _pg_role(pid)

    def spent(self) -> dict[str, float]:
        self.sample()
        return {
            name: sum(self._last[p] - self._base[p] for p in pids)
            for name, pids in self._groups.items()
        }

    def postgresql_roles(self) -> dict[str, float]:
        """The PostgreSQL group's CPU seconds by role (``backend`` for the clients'
        connections, else the process title: ``walwriter``, ``checkpointer``, ...), and
        ``reaped``: what its processes that exited meanwhile spent, as the postmaster
        counts it (autovacuum workers come and go between samples; an exited backend
        that was also sampled alive is counted in both)."""
        roles: dict[str, float] = {}
        for pid in self._groups.get("postgresql", []):
            role = self._roles.setdefault(pid, _pg_role(pid))
            roles[role] = roles.get(role, 0.0) + self._last[pid] - self._base[pid]
        if self._pg_dir is not None:
            postmaster = self._groups["postgresql"][0]
            roles["reaped"] = _cpu_seconds(postmaster, reaped=True) - self._reaped
        return roles


def _cpu_seconds(pid: int, *, reaped: bool = False) -> float:
    """User + system CPU time of a live process (0 if it is gone); ``reaped``: of its
    children that it has waited for instead."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    user = 13 if reaped else 11
    return (int(fields[user]) + int(fields[user + 1])) / os.sysconf("SC_CLK_TCK")


def _pg_role(pid: int) -> str:
    """A PostgreSQL process's role from its title: ``backend`` for a client's connection
    (``postgres: user db [local] idle``), ``postmaster``, else the title's first word."""
    try:
        title = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return "gone"
    if not title.startswith("postgres: "):
        return "postmaster"
    words = title.removeprefix("postgres: ").split()
    if "[local]" in words or any(w[:1].isdigit() and "." in w for w in words):
        return "backend"
    return " ".join(words[:2]) if words[:1] == ["autovacuum"] else words[0] if words else "?"


async def _ready(http: _Http) -> None:
    for _ in range(900):
        with contextlib.suppress(OSError, asyncio.IncompleteReadError):
            if (await http.request("GET", "/v1/ready"))[0] == 200:
                return
        await asyncio.sleep(0.1)
    raise SystemExit("the API did not become ready")


async def _watch(http: _Http, run_ids: list[str], lags: list[float]) -> None:
    """Follow a few runs' SSE streams: how long after a worker stamped an event
    (its ``at``) this client received it."""

    async def follow(run_id: str) -> None:
        async for received, event in http.stream(f"/v1/runs/{run_id}/events"):
            if "at" in event:  # ISO 8601 with milliseconds (the API's JSON convention)
                lags.append(received - _ts(event["at"]))

    await asyncio.gather(*[follow(r) for r in run_ids])


async def _ended_runs(db: str) -> AsyncGenerator[int, None]:
    """The number of ended runs, each time it is asked (one connection, one statement)."""
    import psycopg

    ended = "('completed', 'budget_exhausted', 'failed', 'cancelled')"
    async with await psycopg.AsyncConnection.connect(db, autocommit=True) as conn:
        while True:
            row = await (
                await conn.execute(f"SELECT count(*) FROM runs WHERE status IN {ended}")
            ).fetchone()
            yield 0 if row is None else int(row[0])


async def _wait_all(
    http: _Http,
    sids: set[str],
    runs: int,
    kill: subprocess.Popen[bytes] | None,
    t0: float,
    meter: _CpuMeter,
    db: str | None,
    before: int = 0,
) -> tuple[int | None, float | None]:
    """Until every session's run has ended; SIGKILL ``kill`` at half (returns how many
    runs had ended then, and when). PostgreSQL: one
    count of the ended runs per sweep, asked of the database directly (a listing of every
    session through the API would cost the API and the database more than the load's
    own requests); SQLite: one listing per sweep (a session whose run ended has no
    active run and all its 6 messages)."""
    killed_at = None
    killed_time = None
    ended = _ended_runs(db) if db is not None else None
    while True:
        if ended is not None:
            done = await anext(ended) - before
        else:
            _, page = await http.request("GET", f"/v1/sessions?limit={len(sids)}")
            done = sum(
                1
                for s in page["sessions"]
                if s["session_id"] in sids and s["active_run_id"] is None and s["version"] >= 6
            )
        meter.sample()
        if kill is not None and killed_at is None and done >= runs // 2:
            kill.send_signal(signal.SIGKILL)
            killed_at, killed_time = done, time.time()
        if done == runs:
            return killed_at, killed_time
        if time.time() - t0 > 900:
            raise SystemExit(f"timed out with {runs - done} runs unfinished")
        await asyncio.sleep(0.25)


async def _warm_up(http: _Http, runs: int, rate: float | None, db: str | None) -> None:
    """Runs before the measured ones, in sessions of their own, submitted at ``rate`` (or
    10 ms apart) and waited for until every one has ended: the figures are then those of
    processes that have served before, not of their first requests."""
    made = await asyncio.gather(*[http.request("POST", "/v1/sessions", {}) for _ in range(runs)])
    sids = [body["session_id"] for _, body in made]
    for sid in sids:
        status, body = await http.request("POST", f"/v1/sessions/{sid}/messages", {"text": "go"})
        if status != 202:
            raise SystemExit(f"a warm-up submission failed: {status} {body}")
        await asyncio.sleep(1 / rate if rate else 0.01)
    if db is None:
        return
    async with contextlib.aclosing(_ended_runs(db)) as ended:
        async for done in ended:
            if done >= runs:
                return
            await asyncio.sleep(0.1)


async def _drive(
    port: int,
    key: str,
    runs: int,
    kill: subprocess.Popen[bytes] | None,
    before: Callable[[], Awaitable[None]] | None,
    after: Callable[[], Awaitable[dict[str, Any]]] | None,
    watch: int,
    pids: dict[str, int],
    db: str | None,
    sampler: _WaitSampler | None = None,
    rate: float | None = None,
    warmup: int = 0,
) -> dict[str, Any]:
    http = _Http(port, key, 64)
    wal: dict[str, int] = {}
    tables: dict[str, tuple[int, ...]] = {}
    sampling = None
    stop_sampling = asyncio.Event()
    try:
        await _ready(http)
        made = await asyncio.gather(
            *[http.request("POST", "/v1/sessions", {}) for _ in range(runs)]
        )
        sids = [body["session_id"] for _, body in made]
        if warmup:
            await _warm_up(http, warmup, rate, db)
        if before is not None:
            await before()
        groups = {"driver": [os.getpid()], **{k: [p] for k, p in pids.items()}}
        pg_dir = None
        if db is not None:
            pg_dir = await _pg_data_dir(db)
            xacts = await _pg_xacts(db)
            wal = await _pg_wal(db)
            tables = await _pg_tables(db)
            if sampler is not None:
                sampling = asyncio.ensure_future(sampler.run(db, stop_sampling))
        meter = _CpuMeter(groups, pg_dir)
        t0 = time.time()
        lags: list[float] = []
        follows: list[asyncio.Future[None]] = []

        async def submit(i: int, sid: str) -> tuple[int, Any]:
            if rate is not None:  # open loop: on schedule, whatever the answers so far
                await asyncio.sleep(max(0.0, t0 + i / rate - time.time()))
            status, body = await http.request(
                "POST", f"/v1/sessions/{sid}/messages", {"text": "go"}
            )
            if status == 202 and i >= runs - watch:  # the last few, followed live
                follows.append(asyncio.ensure_future(_watch(http, [body["run_id"]], lags)))
            return status, body

        async def submit_all() -> tuple[list[tuple[int, Any]], float]:
            posted = await asyncio.gather(*[submit(i, s) for i, s in enumerate(sids)])
            return posted, time.time() - t0

        submission = asyncio.ensure_future(submit_all())
        if rate is None:  # all at once: every submission answered before the wait
            await asyncio.wait([submission])
        else:  # paced: the runs end (and a worker is killed) while submissions go on
            await asyncio.sleep(0)
        waiting = asyncio.ensure_future(
            _wait_all(http, set(sids), runs, kill, t0, meter, db, warmup)
        )
        posted, submitted = await submission
        if any(status != 202 for status, _ in posted):
            waiting.cancel()
            raise SystemExit(f"submissions failed: {[p for p in posted if p[0] != 202][:3]}")
        run_ids = [body["run_id"] for _, body in posted]
        killed_at, killed_time = await waiting
        cpu = meter.spent()
        pg_roles = meter.postgresql_roles()
        stop_sampling.set()
        if sampling is not None:
            await sampling
        if db is not None:
            cpu["transactions"] = await _pg_xacts(db) - xacts - 1
            wal["lsn_after"] = (await _pg_wal(db))["lsn"]
        stats = await after() if after is not None else None
        await asyncio.wait_for(asyncio.gather(*follows), 60)
        done = [(await http.request("GET", f"/v1/runs/{r}"))[1] for r in run_ids]
        histories = [
            (await http.request("GET", f"/v1/sessions/{s}/messages?limit=100"))[1] for s in sids
        ]
    finally:
        http.close()
    return {
        "t0": t0, "submitted": submitted, "killed_at": killed_at, "runs": done,
        "killed_time": killed_time,
        "histories": histories, "lags": lags, "pg": stats, "cpu": cpu, "pg_roles": pg_roles,
        "killed_pid": None if kill is None or killed_at is None else str(kill.pid),
        "wal": wal,
        "tables": tables if db is not None else {},
    }  # fmt: skip


async def _all_events(port: int, key: str, run_ids: list[str]) -> list[list[dict[str, Any]]]:
    http = _Http(port, key, 1)
    try:
        return [[e async for _, e in http.stream(f"/v1/runs/{r}/events")] for r in run_ids]
    finally:
        http.close()


def _ts(iso: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(iso).timestamp()


def _step_latencies(
    events: list[list[dict[str, Any]]], after: float = 0.0, before: float = float("inf")
) -> list[float]:
    """Each step's time (see the module's doc); only the steps that began at ``after``
    or later and before ``before``."""
    out: list[float] = []
    for run in events:
        # A run_finished without "at" is the stream's own ending for a run whose worker
        # was killed after the run's last commit but before its events were written.
        marks = [  # ISO 8601 with milliseconds (the API's JSON convention)
            _ts(e["at"]) for e in run if e["type"] in ("step_started", "run_finished") and "at" in e
        ]
        out.extend(b - a for a, b in itertools.pairwise(marks) if after <= a < before)
    return out


def _verify(result: dict[str, Any], ledger: Path, warmup: int = 0) -> dict[str, Any]:
    """Against the tool's own ledger, not the store's view of what ran (the warm-up runs'
    calls are in it too: two each, checked the same way)."""
    statuses: dict[str, int] = {}
    for run in result["runs"]:
        statuses[run["status"]] = statuses.get(run["status"], 0) + 1
    expected = ["user", "assistant", "tool_result", "assistant", "tool_result", "assistant"]
    bad_histories = 0
    for h in result["histories"]:
        msgs = h["messages"]
        ids = {m["message_id"] for m in msgs}
        seqs = [m["seq"] for m in msgs]
        if [m["kind"] for m in msgs] != expected or len(ids) != 6 or seqs != list(range(1, 7)):
            bad_histories += 1
    attempts = [line.split() for line in (ledger / "attempts.log").read_text().splitlines()]
    keys = {key for _, key in attempts}
    # A call is attempted again only when the worker that attempted it first was killed
    # (recovery re-executes an idempotent call with the same key, DESIGN §4).
    first: dict[str, str] = {}
    unexplained = 0
    for pid, key in attempts:
        if key in first and first[key] != result["killed_pid"]:
            unexplained += 1
        first.setdefault(key, pid)
    effects = sum(1 for p in ledger.iterdir() if p.name.startswith("idem_"))
    n = len(result["runs"])
    calls = 2 * (n + warmup)
    return {
        "statuses": statuses,
        "histories_wrong": bad_histories,
        "tool_calls": len(keys),
        "tool_attempts": len(attempts),
        "tool_calls_reattempted_after_kill": len(attempts) - len(keys) - unexplained,
        "tool_calls_reattempted_otherwise": unexplained,
        "tool_effects_applied": effects,
        "every_effect_once": effects == len(keys) == calls,
        "ok": statuses == {"completed": n}
        and bad_histories == 0
        and effects == len(keys) == calls
        and unexplained == 0,
    }


def count_between(low: int, high: int) -> Callable[[str], int]:
    """An argparse type: a whole number from ``low`` to ``high``, else an error naming the
    range (``choices=range(...)`` would print every number in it)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be from {low} to {high}, not {value}")
        return value

    return parse


def _ms(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return round(1000 * ordered[min(len(ordered) - 1, int(q * len(ordered)))], 2)


def _report(a: argparse.Namespace, result: dict[str, Any], ledger: Path) -> dict[str, Any]:
    runs = result["runs"]
    t0 = result["t0"]
    ended = [_ts(r["ended_at"]) for r in runs if r["ended_at"]]
    elapsed = max(ended) - t0
    steps = _step_latencies(result["events"])
    run_latency = [_ts(r["ended_at"]) - _ts(r["started_at"]) for r in runs if r["ended_at"]]
    return {
        "store": a.store,
        "runs": a.runs,
        "worker_processes": a.workers if a.store == "postgresql" else 1,
        "concurrency_per_worker": a.concurrency,
        "submission_rate": a.rate,
        "warmup_runs": a.warmup,
        "killed_worker_after_runs": result["killed_at"],
        "killed_after_s": None
        if result["killed_time"] is None
        else round(result["killed_time"] - t0, 3),
        "last_run_ended_after_kill_s": None
        if result["killed_time"] is None
        else round(max(ended) - result["killed_time"], 3),
        "submit_s": round(result["submitted"], 3),
        "elapsed_s": round(elapsed, 3),
        "runs_per_s": round(len(runs) / elapsed, 1),
        "steps": len(steps),
        "step_latency_ms_p50": _ms(steps, 0.5),
        "step_latency_ms_p99": _ms(steps, 0.99),
        "step_latency_ms_p99_after_submit": _ms(
            _step_latencies(result["events"], t0 + result["submitted"]), 0.99
        ),
        "step_latency_ms_p99_first_second": _ms(
            _step_latencies(result["events"], before=t0 + 1.0), 0.99
        ),
        "step_latency_ms_p99_after_first_second": _ms(
            _step_latencies(result["events"], t0 + 1.0), 0.99
        ),
        "run_latency_ms_p50": _ms(run_latency, 0.5),
        "run_latency_ms_p99": _ms(run_latency, 0.99),
        "sse_events_watched": len(result["lags"]),
        "sse_delivery_ms_p50": _ms(result["lags"], 0.5),
        "sse_delivery_ms_p99": _ms(result["lags"], 0.99),
        "load_avg_1m": round(os.getloadavg()[0], 2),
        "pg_settings": a.pg_setting,
        **_cpu_report(result["cpu"], len(runs)),
        **_pg_roles_report(result["pg_roles"], len(runs)),
        **_verify(result, ledger, a.warmup),
    }


def _pg_roles_report(roles: dict[str, float], runs: int) -> dict[str, Any]:
    """PostgreSQL's CPU ms per run by role (see :meth:`_CpuMeter.postgresql_roles`)."""
    if not roles:
        return {}
    per = {k: round(1000 * v / runs, 2) for k, v in sorted(roles.items(), key=lambda i: -i[1])}
    return {"postgresql_cpu_ms_per_run_by_role": per}


def _cpu_report(cpu: dict[str, float], runs: int) -> dict[str, Any]:
    """CPU ms per run by process (workers summed) and in all, from the first submission
    to the last run's end (the driver's own client included); transactions per run."""
    xacts = cpu.pop("transactions", None)
    per: dict[str, float] = {}
    for name, seconds in cpu.items():
        key = "workers" if name.startswith("worker") else name
        per[key] = per.get(key, 0.0) + 1000 * seconds / runs
    workers = {k: round(1000 * v / runs, 1) for k, v in cpu.items() if k.startswith("worker")}
    out: dict[str, Any] = {
        "cpu_ms_per_run": {k: round(v, 1) for k, v in per.items()},
        "cpu_ms_per_run_by_worker": workers,
        "cpu_ms_per_run_total": round(sum(per.values()), 1),
    }
    if xacts is not None:
        out["transactions_per_run"] = round(xacts / runs, 2)
    return out


def _run(a: argparse.Namespace, tmp: Path, db: str) -> dict[str, Any]:
    shm = Path("/dev/shm")
    ledger = Path(tempfile.mkdtemp(prefix="plait-ledger-", dir=shm if shm.is_dir() else tmp))
    try:
        return _run_with(a, db, ledger)
    finally:
        shutil.rmtree(ledger, ignore_errors=True)


def _run_with(a: argparse.Namespace, db: str, ledger: Path) -> dict[str, Any]:
    key = _key(db)
    port = _free_port()
    shared = a.store == "postgresql"
    common = ["--db", db, "--ledger", str(ledger), "--lease", str(a.lease)]
    env = _bytecode_env()
    api = _spawn("--role", "api", "--port", str(port), "--in-process",
                 "0" if shared else str(a.concurrency), *common, env=env)  # fmt: skip
    workers = [
        _spawn("--role", "worker", "--concurrency", str(a.concurrency), *common, env=env)
        for _ in range(a.workers if shared else 0)
    ]
    stats = a.pg_stats and shared
    try:
        # One worker alone is not killed: nothing would be left to recover its runs.
        kill = workers[0] if len(workers) > 1 and a.kill else None
        reset = (lambda: _pg_stats_reset(db)) if stats else None
        snapshot = (lambda: _pg_stats(db, a.runs)) if stats else None
        pids = {"api": api.pid, **{f"worker{i}": w.pid for i, w in enumerate(workers)}}
        sampler = _WaitSampler() if a.waits and shared else None
        result = asyncio.run(
            _drive(
                port,
                key,
                a.runs,
                kill,
                reset,
                snapshot,
                a.watch,
                pids,
                db if shared else None,
                sampler,
                a.rate,
                a.warmup,
            )
        )
        run_ids = [r["run_id"] for r in result["runs"]]
        result["events"] = asyncio.run(_all_events(port, key, run_ids))
    finally:
        for proc in [api, *workers]:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in [api, *workers]:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=60)
    report = _report(a, result, ledger)
    if shared:
        # The counters once every client's backend has exited (each reports its
        # statistics when it ends; an idle one may hold them back for seconds).
        time.sleep(0.5)
        report.update(_wal_report(result["wal"], asyncio.run(_pg_wal(db)), a.runs))
        if stats:
            report["rows_per_run"] = _rows_report(
                result["tables"], asyncio.run(_pg_tables(db)), a.runs
            )
    if sampler is not None:
        report["waits"] = sampler.report()
    if stats:
        report["pg"] = result["pg"]
    return report


def _rows_report(
    before: dict[str, tuple[int, ...]], after: dict[str, tuple[int, ...]], runs: int
) -> dict[str, dict[str, float]]:
    """Per table and run: rows inserted, updated, and of those updated in place (HOT),
    sequential scans and the rows they read; and in all, the autovacuum's vacuums and
    analyses of the table during the load."""
    out = {}
    for table, counts in sorted(after.items()):
        was = before.get(table, (0,) * len(counts))
        ins, upd, hot, vacuums, analyses, scans, scanned = (
            n - b for n, b in zip(counts, was, strict=True)
        )
        if ins or upd or vacuums or analyses or scans:
            out[table] = {
                "inserted": round(ins / runs, 2),
                "updated": round(upd / runs, 2),
                "hot": round(hot / runs, 2),
                "autovacuums": vacuums,
                "autoanalyzes": analyses,
                "seq_scans": round(scans / runs, 2),
                "seq_rows_read": round(scanned / runs, 1),
            }
    return out


def _wal_report(before: dict[str, int], after: dict[str, int], runs: int) -> dict[str, Any]:
    """WAL per run: bytes from the WAL position over the load (exact); records, full-page
    images and syncs from ``pg_stat_wal`` once the clients have gone (they include the
    few reads the checks make after the load: reads write no WAL)."""
    return {
        "wal_bytes_per_run": round((before["lsn_after"] - before["lsn"]) / runs),
        "wal_records_per_run": round((after["records"] - before["records"]) / runs, 1),
        "wal_fpi_per_run": round((after["fpi"] - before["fpi"]) / runs, 2),
        "wal_syncs_per_run": round((after["syncs"] - before["syncs"]) / runs, 2),
    }


def _profiled(role: str, work: Callable[[], None]) -> None:
    """``SVC_LOAD_PROFILE=DIR``: profile the process's CPU time (cProfile with a CPU
    clock: waits and preemption are not counted) into ``DIR/<role>-<pid>.prof``."""
    out = os.environ.get("SVC_LOAD_PROFILE")
    if not out:
        work()
        return
    import cProfile

    def leave(signum: int, frame: object) -> None:
        raise SystemExit(0)

    # uvicorn takes SIGTERM, shuts down, then raises it again with this handler back:
    # an exit, so the profile below is written (with the default handler it was not)
    signal.signal(signal.SIGTERM, leave)
    profile = cProfile.Profile(time.process_time)
    profile.enable()
    try:
        work()
    finally:
        profile.disable()
        profile.dump_stats(Path(out) / f"{role}-{os.getpid()}.prof")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--store", choices=["postgresql", "sqlite"], default="postgresql")
    p.add_argument("--runs", type=count_between(2, 2000), default=500, metavar="2..2000")
    p.add_argument(
        "--rate",
        type=float,
        help="submit at this many runs/s, on schedule (an open-loop arrival rate), instead "
        "of all at once",
    )
    p.add_argument("--workers", type=int, default=4)
    p.add_argument(
        "--warmup",
        type=int,
        default=0,
        metavar="N",
        help="N runs served (and not measured) before the measured ones (PostgreSQL)",
    )
    p.add_argument(
        "--concurrency", type=int, default=4, help="runs per worker at once (as plait serve/worker)"
    )
    p.add_argument("--lease", type=float, default=3.0)
    p.add_argument("--watch", type=int, default=20, help="runs followed live over SSE")
    p.add_argument("--pg-stats", action="store_true", help="count statements per run")
    p.add_argument(
        "--waits", action="store_true", help="sample the backends' wait events and lock waits"
    )
    p.add_argument(
        "--kill",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="SIGKILL worker 0 halfway (its runs wait for their leases to expire)",
    )
    p.add_argument(
        "--fsync",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="--no-fsync: a cluster that does not fsync (splits the cost of durability off; "
        "never a figure of the service)",
    )
    p.add_argument(
        "--pg-setting",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a server setting of the cluster (repeatable), e.g. commit_delay=100",
    )
    p.add_argument(
        "--pg-socket",
        action="store_true",
        help="connect to PostgreSQL over its Unix socket (as a service on the database's "
        "machine would) instead of TCP on 127.0.0.1",
    )
    p.add_argument("--role", choices=["driver", "api", "worker"], default="driver")
    p.add_argument("--db")
    p.add_argument("--port", type=int)
    p.add_argument("--ledger")
    p.add_argument("--in-process", type=int, default=0)
    a = p.parse_args()
    if a.warmup and a.store != "postgresql":
        p.error("--warmup needs --store postgresql (it waits for the warm-up runs there)")
    if a.rate is not None and a.rate <= 0:
        p.error(f"--rate must be a positive number of runs per second, not {a.rate}")
    if a.role == "api":
        _profiled("api", lambda: serve_main(a.db, a.port, Path(a.ledger), a.in_process, a.lease))
        return
    if a.role == "worker":
        _profiled("worker", lambda: worker_main(a.db, Path(a.ledger), a.concurrency, a.lease))
        return
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("terminated"))  # still clean up
    with (
        tempfile.TemporaryDirectory(prefix="plait-load-") as tmp,
        _store(
            a.store,
            Path(tmp),
            pg_stats=a.pg_stats,
            fsync=a.fsync,
            settings=a.pg_setting,
            socket=a.pg_socket,
        ) as db,
    ):
        report = _run(a, Path(tmp), db)
    print(json.dumps(report))
    if not report["ok"]:
        raise SystemExit("correctness checks failed")


if __name__ == "__main__":
    main()
