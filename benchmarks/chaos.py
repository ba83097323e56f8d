"""Chaos run (not a test): runs through the HTTP API while the store fails under them.

    uv run python benchmarks/chaos.py                      # PostgreSQL, then SQLite
    uv run python benchmarks/chaos.py --store postgresql --runs 80

Loopback only, bounded in count (``--runs`` at most 200) and time (``--timeout``, at most
600 s per store; each phase gives up and reports what was left then).

PostgreSQL: a throw-away cluster (fsync on), an API process without a worker and two
worker processes (``--concurrency`` runs each, lease ``--lease`` s), driven as
``plait worker`` drives them. ``--runs`` runs are submitted at ``--rate`` a second (a
submission the API refuses with a 5xx is counted and retried, as a client would; only a
202 makes a run *accepted*) while, on a schedule, PostgreSQL is restarted with ``pg_ctl restart -m
immediate`` twice, then worker 1 is SIGSTOPped for ``--lease`` + 2 s (past its lease: the
other worker takes its runs over) and SIGCONTinued.

SQLite (as root only: it needs a tmpfs of its own): the store lives on a small tmpfs;
one API process with its in-process worker; midway a file fills the tmpfs until the
kernel says ``ENOSPC``, stays for ``--full-seconds``, and is deleted.

Each run is three steps of a deterministic model (each model call waits ``--step-delay``
s, so runs are in flight when the faults strike): two calls of an idempotent tool, then an
answer. The tool applies its effect once per idempotency key (a file created with
``O_EXCL``, named by run, call number and key), as an idempotent API would.

Reported per store:
- ``accepted``: runs the API answered 202; ``completed``: accepted runs that ended
  ``completed``; ``lost``: accepted runs the API no longer knows, or whose session
  lacks their user message; ``applied_twice``: tool calls (run, call number) whose effect
  was applied under more than one key (a step re-run as a new call) plus histories that
  hold a message twice or out of order (``histories_wrong``: a stale writer's work);
  ``stuck``: accepted runs not terminal when the phase ended (``awaiting_resolution``
  included), or terminal but not ``completed``.
- ``http_5xx``: answers by status (500 must never happen; 503 ``store_unavailable`` may,
  during a fault); ``worker_exits``: worker processes that ended on their own.
- per fault: when it struck (s after the first submission), how long it lasted,
  whether ``/v1/ready`` answered 503 during it, ``ready_back_s`` (from the fault's end
  to the first 200 of ``/v1/ready``) and ``recovered_s``: from the fault's end until
  every run that was ``running`` or ``queued`` when it struck had ended (the time to
  recover the work caught in the fault; ``null`` if some never did).

Exit status 1 unless every accepted run completed, none lost, none applied twice, none
stuck, no 500 and no worker exited.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import errno
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from svc_load import _free_port, _Http, _key, count_between

HERE = Path(__file__).resolve()
TERMINAL = {"completed", "failed", "cancelled", "budget_exceeded", "timed_out"}


# --- the agent the service runs ---------------------------------------------------------------


def _runtime(db: str, ledger: Path, *, lease: float, step_delay: float, owner: str | None) -> Any:
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

    async def model(request: ModelRequest) -> ModelResponse:
        await asyncio.sleep(step_delay)
        calls = sum(1 for m in request.context.items if isinstance(m, AssistantMessage))
        if calls < 2:
            call = RawToolCall(id=f"c{calls}", name="mark", arguments={"n": calls})
            return ModelResponse(text="", tool_calls=(call,))
        return ModelResponse(text="done")

    async def mark(invocation: ToolInvocation) -> ToolOutput:
        n = invocation.call.arguments()["n"]
        name = f"{invocation.run_id}.{n}.{invocation.idempotency_key}"
        with contextlib.suppress(FileExistsError):  # applied before: idempotent
            os.close(os.open(ledger / name, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        return ToolOutput(content="ok")

    spec = ToolSpec(
        name="mark",
        description="Record a mark.",
        parameters={"type": "object", "properties": {"n": {"type": "integer"}}},
        effect=EffectClass.IDEMPOTENT,
    )
    store: Any = open_store(db)
    return Runtime(
        store=store,
        artifacts=store,
        model=FunctionModel(model, name="chaos"),
        tools=[Tool(spec=spec, execute=mark)],
        clock=SystemClock(),
        ids=RandomIds(),
        lease_seconds=lease,
        owner=owner,
    )


def serve_main(a: argparse.Namespace) -> None:
    import uvicorn

    from plait.entrypoints.http.app import create_app
    from plait.entrypoints.http.server import Settings, configure_logging, context_for

    configure_logging("warning")
    rt = _runtime(a.db, Path(a.ledger), lease=a.lease, step_delay=a.step_delay, owner=None)
    settings = Settings(db=a.db, log_level="warning", serve_workers=a.in_process)
    app = create_app(context_for(rt, settings))
    uvicorn.run(
        app, host="127.0.0.1", port=a.port, log_config=None, access_log=False, loop="asyncio"
    )


def worker_main(a: argparse.Namespace) -> None:
    """As ``plait worker`` runs (:func:`plait.entrypoints.http.server.run_worker`): an
    exception out of the worker ends the process with a non-zero status."""
    from plait.application.worker import Worker
    from plait.entrypoints.http.events import encode_event
    from plait.entrypoints.http.server import configure_logging, run_async

    configure_logging("warning")

    async def go() -> None:
        rt = _runtime(a.db, Path(a.ledger), lease=a.lease, step_delay=a.step_delay, owner=a.owner)
        worker = Worker(
            service=rt.service, queue=rt.store, encode=encode_event, concurrency=a.concurrency
        )
        stop = asyncio.Event()
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
        try:
            await worker.run(stop)
        finally:
            await rt.close()

    run_async(go())


# --- faults -----------------------------------------------------------------------------------


@dataclass
class Fault:
    name: str
    at: float
    """Seconds after the first submission."""
    strike: Callable[[], Awaitable[None]]
    """Injects the fault and returns once it is over (the store is back, the worker
    resumed, the space freed)."""


@dataclass
class FaultReport:
    name: str
    at_s: float = 0.0
    lasted_s: float = 0.0
    caught: list[str] = field(default_factory=list)
    ready_503_seen: bool = False
    ready_back_s: float | None = None
    recovered_s: float | None = None


def _fill(directory: Path) -> Path:
    """Write a file in ``directory`` until the file system is full."""
    filler = directory / "filler"
    chunk = b"\0" * (1 << 20)
    with filler.open("wb", buffering=0) as f:
        for size in (1 << 20, 1 << 12, 1):
            try:
                while True:
                    f.write(chunk[:size])
            except OSError as e:
                if e.errno != errno.ENOSPC:
                    raise
    return filler


# --- the driver -------------------------------------------------------------------------------


class Driver:
    def __init__(self, port: int, key: str, runs: int, rate: float) -> None:
        self.port, self.key = port, key
        self.http = _Http(port, key, 16)
        self.probe = _Http(port, key, 1)
        self.runs = runs
        self.rate = rate
        self.accepted: dict[str, str] = {}  # run id -> session id
        self.status: dict[str, str] = {}
        self.answers: dict[int, int] = {}
        self.ready: list[tuple[float, int]] = []
        self.t0 = 0.0
        self.submitting = True

    async def call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        """One request; a dropped connection counts as status 0 and is retried by the
        caller like a 503."""
        try:
            status, data = await asyncio.wait_for(self.http.request(method, path, body), 60)
        except (OSError, asyncio.IncompleteReadError, TimeoutError, ValueError):
            self.http.close()
            self.http = _Http(self.port, self.key, 16)  # its broken connection is gone
            status, data = 0, None
        self.answers[status] = self.answers.get(status, 0) + 1
        return status, data

    async def until_ok(self, method: str, path: str, body: Any, ok: int) -> Any:
        delay = 0.1
        while True:
            status, data = await self.call(method, path, body)
            if status == ok:
                return data
            if status != 0 and status < 500:  # 5xx are counted and retried
                raise SystemExit(f"{method} {path}: HTTP {status} {data}")
            await asyncio.sleep(delay)
            delay = min(delay * 2, 2.0)

    async def submit_all(self) -> None:
        for _ in range(self.runs):
            session = await self.until_ok("POST", "/v1/sessions", {}, 201)
            sid = session["session_id"]
            run = await self.until_ok("POST", f"/v1/sessions/{sid}/messages", {"text": "go"}, 202)
            self.accepted[run["run_id"]] = sid
            self.status[run["run_id"]] = run["status"]
            await asyncio.sleep(1 / self.rate)
        self.submitting = False

    async def track(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            for run_id in [r for r, s in self.status.items() if s not in TERMINAL]:
                status, data = await self.call("GET", f"/v1/runs/{run_id}")
                if status == 200:
                    self.status[run_id] = data["status"]
            await asyncio.sleep(0.2)

    async def watch_ready(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                status, _ = await asyncio.wait_for(self.probe.request("GET", "/v1/ready"), 30)
            except (OSError, asyncio.IncompleteReadError, TimeoutError, ValueError):
                self.probe.close()
                self.probe = _Http(self.port, self.key, 1)
                status = 0
            self.ready.append((time.monotonic() - self.t0, status))
            await asyncio.sleep(0.1)

    def all_ended(self) -> bool:
        return not self.submitting and all(s in TERMINAL for s in self.status.values())

    async def strike(self, fault: Fault, report: FaultReport) -> None:
        await asyncio.sleep(max(0.0, fault.at - (time.monotonic() - self.t0)))
        report.caught = [r for r, s in self.status.items() if s in ("queued", "running")]
        start = time.monotonic()
        report.at_s = round(start - self.t0, 2)
        await fault.strike()
        end = time.monotonic()
        report.lasted_s = round(end - start, 2)
        back = None
        while True:
            if back is None:
                after = [t for t, s in self.ready if t + self.t0 >= end and s == 200]
                if after:
                    back = after[0] + self.t0 - end
                    report.ready_back_s = round(max(back, 0.0), 2)
            if report.recovered_s is None and all(
                self.status.get(r) in TERMINAL for r in report.caught
            ):
                report.recovered_s = round(time.monotonic() - end, 2)
            if back is not None and report.recovered_s is not None:
                break
            await asyncio.sleep(0.1)
        seen = [s for t, s in self.ready if start - self.t0 <= t <= end - self.t0 + 0.5]
        report.ready_503_seen = 503 in seen


async def _drive(
    port: int, key: str, a: argparse.Namespace, faults: list[Fault]
) -> tuple[Driver, list[FaultReport], bool]:
    d = Driver(port, key, a.runs, a.rate)
    await _until_ready(d.probe)
    stop = asyncio.Event()
    d.t0 = time.monotonic()
    reports = [FaultReport(f.name) for f in faults]
    background = [
        asyncio.ensure_future(d.track(stop)),
        asyncio.ensure_future(d.watch_ready(stop)),
    ]
    striking = [asyncio.ensure_future(d.strike(f, r)) for f, r in zip(faults, reports, strict=True)]
    submitting = asyncio.ensure_future(d.submit_all())
    timed_out = False
    try:
        async with asyncio.timeout(a.timeout):
            await submitting
            await asyncio.gather(*striking)
            while not d.all_ended():  # noqa: ASYNC110
                await asyncio.sleep(0.2)
    except TimeoutError:
        timed_out = True
    finally:
        stop.set()
        for task in [*background, *striking, submitting]:
            task.cancel()
        await asyncio.gather(*background, *striking, submitting, return_exceptions=True)
    return d, reports, timed_out


async def _until_ready(http: _Http) -> None:
    for _ in range(300):
        with contextlib.suppress(OSError, asyncio.IncompleteReadError, ValueError):
            if (await http.request("GET", "/v1/ready"))[0] == 200:
                return
        await asyncio.sleep(0.1)
    raise SystemExit("the API did not become ready")


async def _verify(port: int, key: str, d: Driver) -> dict[str, Any]:
    http = _Http(port, key, 4)
    statuses: dict[str, int] = {}
    lost = stuck = histories_wrong = 0
    expected = ["user", "assistant", "tool_result", "assistant", "tool_result", "assistant"]
    try:
        for run_id, sid in d.accepted.items():
            status, run = await http.request("GET", f"/v1/runs/{run_id}")
            _, page = await http.request("GET", f"/v1/sessions/{sid}/messages?limit=100")
            msgs = page["messages"] if isinstance(page, dict) else []
            if status == 404 or not msgs or msgs[0]["kind"] != "user":
                lost += 1
                continue
            statuses[run["status"]] = statuses.get(run["status"], 0) + 1
            if run["status"] != "completed":
                stuck += 1
                continue
            ids = {m["message_id"] for m in msgs}
            if [m["kind"] for m in msgs] != expected or len(ids) != len(msgs):
                histories_wrong += 1
    finally:
        http.close()
    return {
        "accepted": len(d.accepted),
        "completed": statuses.get("completed", 0),
        "lost": lost,
        "applied_twice": histories_wrong,
        "stuck": stuck,
        "statuses": statuses,
        "histories_wrong": histories_wrong,
    }


def _ledger(verified: dict[str, Any], ledger: Path) -> dict[str, Any]:
    """Add the tool's own ledger: calls whose effect was applied under two keys."""
    keys_per_call: dict[tuple[str, str], set[str]] = {}
    for entry in ledger.iterdir():
        run_id, n, idem = entry.name.split(".", 2)
        keys_per_call.setdefault((run_id, n), set()).add(idem)
    twice = sum(1 for keys in keys_per_call.values() if len(keys) > 1)
    return {
        **verified,
        "applied_twice": verified["histories_wrong"] + twice,
        "tool_effects": len(keys_per_call),
    }


# --- the two stores ---------------------------------------------------------------------------


def _spawn(*args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, str(HERE), *args])


def _stop(procs: list[subprocess.Popen[bytes]]) -> None:
    for proc in procs:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGCONT)
            proc.send_signal(signal.SIGTERM)
    for proc in procs:
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()


def _common(a: argparse.Namespace, db: str, ledger: Path) -> list[str]:
    return [
        "--db",
        db,
        "--ledger",
        str(ledger),
        "--lease",
        str(a.lease),
        "--step-delay",
        str(a.step_delay),
    ]


def run_postgresql(a: argparse.Namespace, ledger: Path) -> dict[str, Any]:
    from plait.testing.postgres import cluster

    with cluster(fsync=True, max_connections=200) as pg:
        key = _key(pg.url)
        port = _free_port()
        common = _common(a, pg.url, ledger)
        api = _spawn("--role", "api", "--port", str(port), "--in-process", "0", *common)
        workers = [
            _spawn(
                "--role",
                "worker",
                "--owner",
                f"chaos-w{i}",
                "--concurrency",
                str(a.concurrency),
                *common,
            )
            for i in range(2)
        ]
        try:

            async def restart() -> None:
                await asyncio.to_thread(pg.restart, "immediate")

            async def pause() -> None:
                os.kill(workers[1].pid, signal.SIGSTOP)
                await asyncio.sleep(a.lease + 2)
                os.kill(workers[1].pid, signal.SIGCONT)

            span = a.runs / a.rate
            faults = [
                Fault("pg_ctl restart -m immediate", span * 0.2, restart),
                Fault("pg_ctl restart -m immediate", span * 0.45, restart),
                Fault(
                    f"SIGSTOP worker 1 for {a.lease + 2:g} s (lease {a.lease:g} s)",
                    span * 0.65,
                    pause,
                ),
            ]
            d, reports, timed_out = asyncio.run(_drive(port, key, a, faults))
            exits = [w.poll() for w in workers]
            verified = _ledger(asyncio.run(_verify(port, key, d)), ledger)
        finally:
            _stop([api, *workers])
    return _result("postgresql", d, reports, verified, exits, timed_out)


@contextlib.contextmanager
def _tmpfs(size_mb: int) -> Iterator[Path]:
    where = Path(tempfile.mkdtemp(prefix="plait-chaos-fs-"))
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size_mb}m", "tmpfs", str(where)], check=True
    )
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)
        shutil.rmtree(where, ignore_errors=True)


def run_sqlite(a: argparse.Namespace, ledger: Path) -> dict[str, Any]:
    with _tmpfs(a.tmpfs_mb) as fs:
        db = f"sqlite:///{fs / 'plait.db'}"
        key = _key(db)
        port = _free_port()
        api = _spawn(
            "--role",
            "api",
            "--port",
            str(port),
            "--in-process",
            str(a.concurrency),
            *_common(a, db, ledger),
        )
        try:

            async def fill() -> None:
                filler = await asyncio.to_thread(_fill, fs)
                await asyncio.sleep(a.full_seconds)
                filler.unlink()

            span = a.sqlite_runs / a.rate
            faults = [Fault(f"disk full for {a.full_seconds:g} s", span * 0.4, fill)]
            sub = argparse.Namespace(**{**vars(a), "runs": a.sqlite_runs})
            d, reports, timed_out = asyncio.run(_drive(port, key, sub, faults))
            exits = [api.poll()]
            verified = _ledger(asyncio.run(_verify(port, key, d)), ledger)
        finally:
            _stop([api])
    return _result("sqlite", d, reports, verified, exits, timed_out)


def _result(
    store: str,
    d: Driver,
    reports: list[FaultReport],
    verified: dict[str, Any],
    exits: list[int | None],
    timed_out: bool,
) -> dict[str, Any]:
    answers = {str(k): v for k, v in sorted(d.answers.items()) if k >= 500 or k == 0}
    result = {
        "store": store,
        **verified,
        "http_5xx": answers,
        "worker_exits": sum(1 for e in exits if e is not None),
        "timed_out": timed_out,
        "faults": [
            {
                "fault": r.name,
                "at_s": r.at_s,
                "lasted_s": r.lasted_s,
                "runs_caught": len(r.caught),
                "ready_503_seen": r.ready_503_seen,
                "ready_back_s": r.ready_back_s,
                "recovered_s": r.recovered_s,
            }
            for r in reports
        ],
    }
    result["ok"] = (
        verified["completed"] == verified["accepted"]
        and verified["lost"] == verified["applied_twice"] == verified["stuck"] == 0
        and "500" not in answers
        and result["worker_exits"] == 0
        and not timed_out
    )
    return result


def _table(results: list[dict[str, Any]]) -> str:
    head = (
        "store",
        "accepted",
        "completed",
        "lost",
        "applied_twice",
        "stuck",
        "http_500",
        "http_503",
        "worker_exits",
    )
    rows = [head]
    for r in results:
        rows.append(
            (
                r["store"],
                r["accepted"],
                r["completed"],
                r["lost"],
                r["applied_twice"],
                r["stuck"],
                r["http_5xx"].get("500", 0),
                r["http_5xx"].get("503", 0),
                r["worker_exits"],
            )
        )
    fault_head = (
        "store",
        "fault",
        "at_s",
        "lasted_s",
        "runs_caught",
        "ready_503_seen",
        "ready_back_s",
        "recovered_s",
    )
    faults = [fault_head]
    for r in results:
        for f in r["faults"]:
            faults.append((r["store"], *f.values()))
    return _grid(rows) + "\n\n" + _grid(faults)


def _grid(rows: list[tuple[Any, ...]]) -> str:
    cells = [[("-" if v is None else str(v)) for v in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(cells[0]))]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in cells
    )


def _seconds(text: str) -> float:
    value = float(text)
    if not 30 <= value <= 600:
        raise argparse.ArgumentTypeError(f"between 30 and 600 seconds, not {value:g}")
    return value


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--store", choices=["both", "postgresql", "sqlite"], default="both")
    p.add_argument("--runs", type=count_between(2, 200), default=80, metavar="2..200")
    p.add_argument("--sqlite-runs", type=count_between(2, 200), default=40, metavar="2..200")
    p.add_argument("--rate", type=float, default=4.0, help="submissions per second")
    p.add_argument("--concurrency", type=int, default=4, help="runs per worker at once")
    p.add_argument("--lease", type=float, default=3.0)
    p.add_argument("--step-delay", type=float, default=0.4, help="seconds per model call")
    p.add_argument("--full-seconds", type=float, default=4.0)
    p.add_argument("--tmpfs-mb", type=int, default=16)
    p.add_argument("--timeout", type=_seconds, default=300.0, help="per store, 30..600 s")
    p.add_argument("--role", choices=["driver", "api", "worker"], default="driver")
    p.add_argument("--db")
    p.add_argument("--port", type=int)
    p.add_argument("--ledger")
    p.add_argument("--owner")
    p.add_argument("--in-process", type=int, default=0)
    a = p.parse_args()
    if a.role == "api":
        serve_main(a)
        return
    if a.role == "worker":
        worker_main(a)
        return
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("terminated"))  # still clean up
    results = []
    stores = ["postgresql", "sqlite"] if a.store == "both" else [a.store]
    for store in stores:
        if store == "sqlite" and os.geteuid() != 0:
            print("sqlite: skipped (filling a disk needs a tmpfs of its own: run as root)")
            continue
        shm = Path("/dev/shm")
        ledger = Path(tempfile.mkdtemp(prefix="plait-chaos-", dir=shm if shm.is_dir() else None))
        try:
            run = run_postgresql if store == "postgresql" else run_sqlite
            results.append(run(a, ledger))
        finally:
            shutil.rmtree(ledger, ignore_errors=True)
    print(_table(results))
    print(json.dumps(results))
    if not all(r["ok"] for r in results):
        raise SystemExit("chaos checks failed")


if __name__ == "__main__":
    main()
