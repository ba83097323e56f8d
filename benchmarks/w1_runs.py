"""W1's CPU per step for a process's first run and for the runs after it, plait beside
the bare loop, each in fresh processes (a script that prints its figures, not a test).

    uv run python benchmarks/w1_runs.py                       # 10 steps, 4 runs, 9 processes each
    uv run python benchmarks/w1_runs.py --steps 200 --runs 3 --procs 7

W1 (``compare.py``) times one run in a fresh process: at 10 steps that run is mostly the
interpreter meeting plait's code for the first time (its functions are not yet specialized
and nothing of them is in the CPU's caches). Here each process drives ``--runs`` runs of
``--steps`` steps one after another, as a server or a long-lived Python program does (plait:
one ``AgentService`` on one SQLite store, a new session per run; the floor: the bare loop of
``peer-bench/drv_baseline.py`` on one connection, ``synchronous=FULL``, a new session id
per run), and reports the CPU (``time.process_time``) of each run's timed window, the one
W1 times, per step: the median over ``--procs`` processes of each kind, interleaved.
Databases go to ``--scratch`` (``/dev/shm`` by default: no fsync cost, as ``--clock cpu``).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
DEFAULT_PEER_BENCH = HERE.parent.parent / "shared" / "peer-bench"


def _plait_runs(db: Path, steps: int, runs: int) -> list[float]:
    sys.path.insert(0, str(HERE))
    import drv_plait  # the W1 driver's model, tool and agent

    async def drive() -> list[float]:
        store = drv_plait.CountingStore(db, io="inline")
        agent = None
        per_step = []
        for _ in range(runs):
            model = drv_plait.FakeModel(steps)
            agent = drv_plait.build_agent(store, model, 1024)
            session = await agent.create_session()
            t0 = time.process_time()
            result = await agent.send(session.id, "please call echo repeatedly")
            per_step.append((time.process_time() - t0) / steps * 1e6)
            assert result.run.status.value == "completed", result.run
            assert model.calls == steps + 1
        await store.close()
        return per_step

    return asyncio.run(drive())


def _floor_runs(db: Path, steps: int, runs: int, peer_bench: Path) -> list[float]:
    sys.path.insert(0, str(peer_bench))
    drv_baseline = importlib.import_module("drv_baseline")  # the floor's loop, as in its W1

    conn = drv_baseline.open_db(str(db), "FULL")
    per_step = []
    for run in range(runs):
        store = drv_baseline.Store(conn, f"w1-{run}")
        model = drv_baseline.FakeModel(steps)
        t0 = time.process_time()
        history = [{"role": "user", "content": "please call echo repeatedly"}]
        store.append(history[0])
        drv_baseline.agent_loop(store, history, model, 1024)
        per_step.append((time.process_time() - t0) / steps * 1e6)
        assert model.calls == steps + 1
    conn.close()
    return per_step


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--runs", type=int, default=4, help="runs per process")
    parser.add_argument("--procs", type=int, default=9, help="processes of each kind")
    parser.add_argument("--scratch", type=Path, default=Path("/dev/shm"))
    parser.add_argument("--peer-bench", type=Path, default=DEFAULT_PEER_BENCH)
    parser.add_argument("--child", choices=["plait", "floor"], help=argparse.SUPPRESS)
    parser.add_argument("--db", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.steps < 1 or args.runs < 1 or args.procs < 1:
        raise SystemExit("--steps, --runs and --procs must be at least 1")
    if args.child == "plait":
        print(json.dumps(_plait_runs(args.db, args.steps, args.runs)))
        return
    if args.child == "floor":
        print(json.dumps(_floor_runs(args.db, args.steps, args.runs, args.peer_bench)))
        return
    if not (args.peer_bench / "drv_baseline.py").is_file():
        raise SystemExit(f"--peer-bench {args.peer_bench}: no drv_baseline.py there")
    if not args.scratch.is_dir():
        raise SystemExit(f"--scratch {args.scratch}: not a directory")
    figures: dict[str, list[list[float]]] = {"plait": [], "floor": []}
    with tempfile.TemporaryDirectory(dir=args.scratch, prefix="w1-runs-") as scratch:
        for proc in range(args.procs):
            for kind in ("plait", "floor"):
                db = Path(scratch) / f"{kind}-{proc}.db"
                command = [sys.executable, __file__, "--child", kind, "--db", str(db)]
                command += ["--steps", str(args.steps), "--runs", str(args.runs)]
                out = subprocess.run(
                    [*command, "--peer-bench", str(args.peer_bench)],
                    capture_output=True,
                    text=True,
                    check=False,
                )
                if out.returncode != 0:
                    raise SystemExit(f"{kind} failed:\n{out.stderr[-3000:]}")
                figures[kind].append(json.loads(out.stdout.strip().splitlines()[-1]))
    print(
        f"W1 CPU per step (us), {args.steps} steps, runs one after another in one process; "
        f"medians of {args.procs} processes each (load average {os.getloadavg()[0]:.2f})"
    )
    print("| run | plait | floor | ratio |")
    print("|---|---|---|---|")
    for run in range(args.runs):
        plait = statistics.median(p[run] for p in figures["plait"])
        floor = statistics.median(f[run] for f in figures["floor"])
        label = "1st (W1's)" if run == 0 else f"{run + 1}"
        print(f"| {label} | {plait:.1f} | {floor:.1f} | {plait / floor:.2f}x |")


if __name__ == "__main__":
    main()
