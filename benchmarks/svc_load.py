"""Service load test (not a timed test): runs through the HTTP API, workers on a shared store.

    uv run python benchmarks/svc_load.py --store postgresql --runs 500 --workers 4
    uv run python benchmarks/svc_load.py --store sqlite --runs 500

PostgreSQL: starts a throw-away cluster (fsync on), an API process (no in-process worker)
and ``--workers`` worker processes; submits ``--runs`` runs concurrently (one session
each) and SIGKILLs worker 0 once half of the runs have ended. SQLite: one process serving
the API with an in-process worker; nothing is killed.

Each run is three steps with a deterministic function model (no network): two calls of an
idempotent tool, then an answer. The tool records every attempt and applies its effect at
most once per idempotency key (a file created with O_EXCL), so the check is honest about
re-executions after the kill. Verified at the end: every run terminal and completed, each
session holds exactly its 6 messages (no message lost or duplicated), every tool call's
effect applied exactly once. Prints runs/s and p50/p99 step latency (time between a run's
consecutive ``step_started`` events, and from the last one to ``run_finished``, from the
persisted events).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

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
            f.write(inv.idempotency_key + "\n")
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
    store = open_store(db)
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
    from plait.adapters.http.server import Settings

    return Settings(db=db, log_level="warning", **kw)


def serve_main(db: str, port: int, ledger: Path, in_process: int, lease: float) -> None:
    import uvicorn

    from plait.adapters.http.app import create_app
    from plait.adapters.http.server import configure_logging, context_for

    configure_logging("warning")
    rt = _runtime(db, ledger, with_model=in_process > 0, lease=lease)
    app = create_app(context_for(rt, _settings(db, serve_workers=in_process)))
    uvicorn.run(
        app, host="127.0.0.1", port=port, log_config=None, access_log=False,
        timeout_keep_alive=120, backlog=4096,
    )  # fmt: skip


def worker_main(db: str, ledger: Path, concurrency: int, lease: float) -> None:
    from plait.adapters.http.events import encode_event
    from plait.adapters.http.server import configure_logging
    from plait.application.worker import Worker

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
        await worker.run(stop)
        await rt.close()

    asyncio.run(go())


# --- the driver -------------------------------------------------------------------------------


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _spawn(*args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, str(HERE), *args])


def _key(db: str) -> str:
    from plait.adapters.http.auth import create_key
    from plait.adapters.stores import open_store
    from plait.adapters.system import RandomIds, SystemClock
    from plait.domain.service import Role

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
def _store(kind: str, tmp: Path) -> Iterator[str]:
    if kind == "sqlite":
        yield f"sqlite:///{tmp / 'plait.db'}"
        return
    from plait.testing.postgres import temporary_cluster

    with temporary_cluster(fsync=True, max_connections=200) as url:
        yield url


async def _drive(url: str, key: str, runs: int, kill: subprocess.Popen[bytes] | None) -> Any:
    limits = httpx.Limits(max_connections=64, keepalive_expiry=30)
    headers = {"Authorization": f"Bearer {key}"}
    async with (
        httpx.AsyncClient(base_url=url, headers=headers, limits=limits, timeout=120) as c,
        httpx.AsyncClient(base_url=url, headers=headers, timeout=120) as watch,
    ):
        for _ in range(200):
            with contextlib.suppress(httpx.TransportError):
                if (await c.get("/v1/ready")).status_code == 200:
                    break
            await asyncio.sleep(0.1)
        sids = [
            r.json()["session_id"]
            for r in await asyncio.gather(*[c.post("/v1/sessions", json={}) for _ in range(runs)])
        ]
        t0 = time.perf_counter()
        run_ids: list[str] = []

        async def submit(sid: str) -> None:
            r = await c.post(f"/v1/sessions/{sid}/messages", json={"text": "go"})
            r.raise_for_status()
            run_ids.append(r.json()["run_id"])

        submitting = asyncio.ensure_future(asyncio.gather(*[submit(s) for s in sids]))
        t_submitted = None
        done: dict[str, dict[str, Any]] = {}
        killed_at = None
        while len(done) < runs:
            if t_submitted is None and submitting.done():
                submitting.result()
                t_submitted = time.perf_counter() - t0
            pending = [r for r in run_ids if r not in done]
            for chunk in range(0, len(pending), 64):
                batch = pending[chunk : chunk + 64]
                # Its own connections: the status polls do not queue behind the submissions.
                for r in await asyncio.gather(*[watch.get(f"/v1/runs/{x}") for x in batch]):
                    run = r.json()
                    if run["status"] not in ("queued", "running"):
                        done[run["run_id"]] = run
            if kill is not None and killed_at is None and len(done) >= runs // 2:
                kill.send_signal(signal.SIGKILL)
                killed_at = len(done)
            if time.perf_counter() - t0 > 900:
                raise SystemExit(f"timed out with {runs - len(done)} runs unfinished")
            await asyncio.sleep(0.25)
        await submitting
        elapsed = time.perf_counter() - t0
        histories = await asyncio.gather(
            *[c.get(f"/v1/sessions/{s}/messages", params={"limit": 100}) for s in sids]
        )
        events = await asyncio.gather(
            *[c.get(f"/v1/runs/{r}/events", params={"after": 0}) for r in run_ids]
        )
    return sids, run_ids, done, histories, events, elapsed, t_submitted, killed_at


def _step_latencies(events: list[httpx.Response]) -> list[float]:
    out: list[float] = []
    for r in events:
        marks = []
        for line in r.text.splitlines():
            if line.startswith("data:"):
                e = json.loads(line[5:])
                if e["type"] in ("step_started", "run_finished") and "at" in e:
                    marks.append(e["at"])
        out.extend(b - a for a, b in itertools.pairwise(marks))
    return out


def _verify(done: dict[str, Any], histories: list[httpx.Response], ledger: Path) -> dict[str, Any]:
    statuses: dict[str, int] = {}
    for run in done.values():
        statuses[run["status"]] = statuses.get(run["status"], 0) + 1
    bad_histories = 0
    for h in histories:
        msgs = h.json()["messages"]
        kinds = [m["kind"] for m in msgs]
        ids = {m["message_id"] for m in msgs}
        expected = ["user", "assistant", "tool_result", "assistant", "tool_result", "assistant"]
        if kinds != expected or len(ids) != 6 or [m["seq"] for m in msgs] != list(range(1, 7)):
            bad_histories += 1
    attempts = (ledger / "attempts.log").read_text().split()
    keys = set(attempts)
    effects = sum(1 for p in ledger.iterdir() if p.name.startswith("idem_"))
    return {
        "statuses": statuses,
        "histories_wrong": bad_histories,
        "tool_calls": len(keys),
        "tool_attempts": len(attempts),
        "tool_calls_reexecuted": len(attempts) - len(keys),
        "tool_effects_applied": effects,
        "every_effect_once": effects == len(keys) == 2 * len(done),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--store", choices=["postgresql", "sqlite"], default="postgresql")
    p.add_argument("--runs", type=int, default=500)
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--concurrency", type=int, default=16, help="runs per worker at once")
    p.add_argument("--lease", type=float, default=3.0)
    p.add_argument("--role", choices=["driver", "api", "worker"], default="driver")
    p.add_argument("--db")
    p.add_argument("--port", type=int)
    p.add_argument("--ledger")
    p.add_argument("--in-process", type=int, default=0)
    a = p.parse_args()
    if a.role == "api":
        serve_main(a.db, a.port, Path(a.ledger), a.in_process, a.lease)
        return
    if a.role == "worker":
        worker_main(a.db, Path(a.ledger), a.concurrency, a.lease)
        return
    with tempfile.TemporaryDirectory(prefix="plait-load-") as tmp, _store(a.store, Path(tmp)) as db:
        ledger = Path(tmp) / "ledger"
        ledger.mkdir()
        key = _key(db)
        port = _free_port()
        shared = a.store == "postgresql"
        common = ["--db", db, "--ledger", str(ledger), "--lease", str(a.lease)]
        api = _spawn("--role", "api", "--port", str(port), "--in-process",
                     "0" if shared else str(a.concurrency), *common)  # fmt: skip
        workers = [
            _spawn("--role", "worker", "--concurrency", str(a.concurrency), *common)
            for _ in range(a.workers if shared else 0)
        ]
        try:
            result = asyncio.run(
                _drive(f"http://127.0.0.1:{port}", key, a.runs, workers[0] if workers else None)
            )
        finally:
            for proc in [api, *workers]:
                if proc.poll() is None:
                    proc.send_signal(signal.SIGTERM)
            for proc in [api, *workers]:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=60)
        _, _, done, histories, events, elapsed, submitted, killed_at = result
        lat = sorted(_step_latencies(events))
        report = {
            "store": a.store,
            "runs": a.runs,
            "worker_processes": len(workers) or 1,
            "killed_worker_after_runs": killed_at,
            "submit_s": None if submitted is None else round(submitted, 3),
            "elapsed_s": round(elapsed, 3),
            "runs_per_s": round(a.runs / elapsed, 1),
            "steps": len(lat),
            "step_latency_ms_p50": round(1000 * statistics.median(lat), 2) if lat else None,
            "step_latency_ms_p99": round(1000 * lat[int(0.99 * (len(lat) - 1))], 2)
            if lat
            else None,
            **_verify(done, histories, ledger),
        }
        print(json.dumps(report))


if __name__ == "__main__":
    main()
