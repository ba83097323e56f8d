"""Run plait's driver beside the peers' (../shared/peer-bench) and print one table.

    uv run python benchmarks/compare.py --reps 3            # plait + peers (if their venv exists)
    uv run python benchmarks/compare.py --reps 5 --no-peers  # plait only
    uv run python benchmarks/compare.py --reps 7 --no-peers --floor  # plait + the bare loops
    uv run python benchmarks/compare.py --reps 5 --no-peers --telemetry  # + W1, telemetry on
    # W1 only, main-before (a checkout of it) vs now vs the floor, on tmpfs, 10 steps:
    uv run python benchmarks/compare.py --reps 9 --no-peers --floor --workloads w1 \
        --before /tmp/plait-before --scratch /dev/shm --steps 10

The peers' venv is made by ``bash ../shared/peer-bench/setup_venv.sh`` (outside the repo).
Each peer x workload runs in its own process, as in peer-bench's run_all.sh; W2 gets a
pristine copy of the built session each time. ``--floor`` runs the bare SQLite loops
(``baseline``, ``baseline-full``: standard library only) with this Python even without the
peers' venv, interleaved with plait, so W1 can be read as a ratio to the FULL floor measured
under the same load (DESIGN §11's target is that ratio), and W2 as a ratio to both loops'
reads (the NORMAL loop's append is not fsynced; the FULL loop's is, as plait's run start
is). Raw JSONL and the table land in
``benchmarks/results/<UTC timestamp>/``.

``--before DIR`` also runs the plait of another checkout (e.g. ``git worktree add DIR main``
before a change) with this Python, its ``src`` first on the path, interleaved with this one
in every rep. ``--scratch DIR`` puts the databases there (``/dev/shm``: CPU only, no fsync
cost). ``--workloads`` restricts what runs; ``--steps`` sets W1's steps. A last table gives,
per label and workload, the median over the reps and (W1) its ratio to the FULL floor.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
DEFAULT_PEER_BENCH = HERE.parent.parent / "shared" / "peer-bench"

# label, driver, variant, workloads (as in peer-bench/run_all.sh)
PEERS = [
    ("baseline", "drv_baseline.py", "normal", "w1,build,w2,w3"),
    ("baseline-full", "drv_baseline.py", "full", "w1,build,w2"),
    ("langgraph", "drv_langgraph.py", "sync", "w1,build,w2,w3"),
    ("langgraph-delta", "drv_langgraph.py", "delta", "w1,build,w2,w3"),
    ("openai-agents", "drv_openai_agents.py", "end", "w1,build,w2,w3"),
    ("pydantic-ai", "drv_pydantic_ai.py", "end", "w1,build,w2,w3"),
    ("pydantic-ai-step", "drv_pydantic_ai.py", "step", "w1"),
]


_CPU_CLOCK = (
    "import runpy, sys, time; time.perf_counter = time.process_time; "
    "sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name='__main__')"
)
"""Runs a driver with ``time.perf_counter`` reading the process's CPU time (all its
threads): what a step costs in CPU, whatever else the machine runs meanwhile."""


def _run(
    python: str,
    driver: Path,
    workload: str,
    db: Path,
    variant: str,
    env: dict[str, str],
    clock: str = "wall",
) -> dict[str, Any]:
    before = driver.parent.parent / "src"
    if driver.parent.name == "benchmarks" and driver.parent != HERE and before.is_dir():
        env = env | {"PYTHONPATH": str(before)}  # the other checkout's plait
    out = subprocess.run(
        [
            python,
            *(("-c", _CPU_CLOCK) if clock == "cpu" else ()),
            str(driver),
            workload,
            "--db",
            str(db),
            "--variant",
            variant,
        ],
        capture_output=True,
        text=True,
        env=env,
        check=False,
        cwd=driver.parent,
    )
    if out.returncode != 0:
        raise SystemExit(f"{driver.name} {workload} failed:\n{out.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--peer-bench", type=Path, default=DEFAULT_PEER_BENCH)
    parser.add_argument(
        "--peervenv",
        type=Path,
        default=Path(os.environ.get("PEERVENV", Path(tempfile.gettempdir()) / "peervenv")),
    )
    parser.add_argument("--no-peers", action="store_true")
    parser.add_argument("--floor", action="store_true", help="run the bare loops (stdlib only)")
    parser.add_argument(
        "--telemetry", action="store_true", help="also run W1 with telemetry on (plait-otel)"
    )
    parser.add_argument("--before", type=Path, help="a checkout of plait before the change")
    parser.add_argument("--scratch", type=Path, help="where the databases go (default: a temp dir)")
    parser.add_argument("--workloads", default="w1,build,w2,w3", help="comma-separated subset")
    parser.add_argument("--steps", type=int, help="W1's steps (default $BENCH_STEPS or 200)")
    parser.add_argument(
        "--clock",
        choices=["wall", "cpu"],
        default="wall",
        help="cpu: every driver times with its process's CPU time instead of the wall clock "
        "(on a loaded machine the wall clock also measures the scheduler; CPU time leaves "
        "out waiting for fsync, so use it on tmpfs)",
    )
    args = parser.parse_args()

    env = dict(os.environ)
    if args.steps is not None:
        env["BENCH_STEPS"] = str(args.steps)
    for k, v in {
        "BENCH_STEPS": "200",
        "BENCH_HISTORY": "5000",
        "BENCH_FORK_AT": "2500",
        "BENCH_MSG_BYTES": "500",
        "BENCH_TOOL_BYTES": "1024",
    }.items():
        env.setdefault(k, v)
    env |= {
        "PYTHONHASHSEED": "0",
        "LANGSMITH_TRACING": "false",
        "LANGCHAIN_TRACING_V2": "false",
        "OPENAI_AGENTS_DISABLE_TRACING": "1",
        "LOGFIRE_IGNORE_NO_CONFIG": "1",
    }

    configs = [("plait", sys.executable, HERE / "drv_plait.py", "", "w1,build,w2,w3")]
    if args.before is not None:
        driver = args.before.resolve() / "benchmarks" / "drv_plait.py"
        if not driver.exists():
            raise SystemExit(f"--before {args.before}: no benchmarks/drv_plait.py there")
        configs.insert(0, ("plait-before", sys.executable, driver, "", "w1,build,w2,w3"))
    if args.telemetry:  # W1 again with OpenTelemetry on (spans and metrics, exported nowhere)
        configs.append(("plait-otel", sys.executable, HERE / "drv_plait.py", "telemetry", "w1"))
    peer_py = args.peervenv / "bin" / "python"
    if args.floor and not args.peer_bench.is_dir():
        raise SystemExit(f"--floor needs the peer benchmark at {args.peer_bench} (--peer-bench)")
    if args.floor and (args.no_peers or not peer_py.exists()):
        configs += [
            (lbl, sys.executable, args.peer_bench / drv, var, wls)
            for lbl, drv, var, wls in PEERS
            if lbl.startswith("baseline")
        ]
    if not args.no_peers:
        if peer_py.exists() and args.peer_bench.is_dir():
            configs += [
                (lbl, str(peer_py), args.peer_bench / drv, var, wls) for lbl, drv, var, wls in PEERS
            ]
        else:
            print(
                f"(no peer venv at {args.peervenv} or no {args.peer_bench}: plait only; "
                "make it with `bash ../shared/peer-bench/setup_venv.sh`)"
            )

    out_dir = HERE / "results" / datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    out_dir.mkdir(parents=True)
    raw = out_dir / "raw.jsonl"
    cfg = (
        f"cfg: steps={env['BENCH_STEPS']} history={env['BENCH_HISTORY']} "
        f"msg_bytes={env['BENCH_MSG_BYTES']} tool_bytes={env['BENCH_TOOL_BYTES']} reps={args.reps} "
        f"clock={args.clock}"
    )
    (out_dir / "cfg.txt").write_text(cfg + "\n")
    print(cfg)
    scratch = Path(tempfile.mkdtemp(prefix="plait-bench-", dir=args.scratch))
    wanted = set(args.workloads.split(","))
    results: list[dict[str, Any]] = []
    try:
        for rep in range(1, args.reps + 1):
            print(f"== rep {rep}/{args.reps}")
            for label, python, driver, variant, workloads in configs:
                d = scratch / label
                shutil.rmtree(d, ignore_errors=True)
                d.mkdir(parents=True)
                for w in workloads.split(","):
                    if w not in wanted and not (w == "build" and wanted & {"w2", "w3"}):
                        continue
                    if w in ("w2", "w3"):
                        for suffix in ("", "-wal"):
                            src = d / f"hist.db{suffix}"
                            if src.exists():
                                shutil.copy(src, d / f"{w}.db{suffix}")
                    db = d / ("hist.db" if w == "build" else f"{w}.db")
                    # plait's W3 (fork) lives in its own script beside drv_plait.py.
                    fork = driver.parent / "fork_bench.py"
                    drv = fork if label.startswith("plait") and w == "w3" else driver
                    res = _run(python, drv, w, db, variant, env, args.clock)
                    res["peer"] = label
                    res["rep"] = rep
                    results.append(res)
                    with raw.open("a") as f:
                        f.write(json.dumps(res) + "\n")
                    keys = (
                        "w1_us_per_step",
                        "step_us_early",
                        "step_us_late",
                        "w2_ms",
                        "w3_ms",
                        "build_s",
                    )
                    print(f"  {label} {w}: " + ", ".join(f"{k}={res[k]}" for k in keys if k in res))
                shutil.rmtree(d, ignore_errors=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    summarize = args.peer_bench / "summarize.py"
    if summarize.exists():
        table = subprocess.run(
            [sys.executable, str(summarize), str(raw)], capture_output=True, text=True, check=True
        ).stdout
        (out_dir / "table.md").write_text(table)
        print(table)
    print(medians(results, cfg))
    print(f"raw results: {raw}")


_FLOOR_NAMES = {"baseline": "floor", "baseline-full": "FULL floor"}


def medians(results: list[dict[str, Any]], cfg: str) -> str:
    """Per label and workload the median over the reps; W1 also as a ratio to the FULL
    floor (``baseline-full``) of the same run, W2 to both floors (``baseline``'s append
    is not fsynced, ``baseline-full``'s is, as plait's run start is). W1's ratio is given
    twice: of the medians, and the median of each rep's own ratio (each label against the
    floor run beside it in that rep) with its quartiles: the machine's pace drifts between
    reps (the fsync of a shared disk most), and a rep's pair saw the same drift."""
    keys = {"w1": "w1_us_per_step", "w2": "w2_ms", "w3": "w3_ms"}
    table: dict[tuple[str, str], list[float]] = {}
    for res in results:
        key = keys.get(res.get("workload", ""))
        if key is not None and key in res:
            table.setdefault((res["peer"], res["workload"]), []).append(float(res[key]))
    floor = table.get(("baseline-full", "w1"))
    reads = {name: table.get((name, "w2")) for name in ("baseline", "baseline-full")}
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    lines = [f"medians ({cfg}; load average now {load})", "| label | workload | median | reps |"]
    lines.append("|---|---|---|---|")
    steps: dict[str, list[float]] = {}  # plait's per-step medians: robust to one stall
    for res in results:
        if res.get("workload") == "w1" and "step_us_late" in res:
            steps.setdefault(res["peer"], []).append(float(res["step_us_late"]))
    for (label, workload), values in sorted(table.items()):
        median = statistics.median(values)
        ratio = ""
        if workload == "w1" and floor:
            ratio = f" ({median / statistics.median(floor):.2f}x the FULL floor"
            paired = _paired_ratios(results, label) if label != "baseline-full" else []
            if paired:
                q1, q2, q3 = statistics.quantiles(paired, n=4) if len(paired) > 1 else paired * 3
                ratio += f"; per rep {q2:.2f}x, quartiles {q1:.2f}-{q3:.2f}"
            ratio += ")"
        if workload == "w2" and label not in reads:
            against = [
                f"{median / statistics.median(values):.2f}x the {_FLOOR_NAMES[name]}"
                for name, values in reads.items()
                if values
            ]
            ratio = f" ({', '.join(against)})" if against else ""
        if workload == "w1" and label in steps:
            ratio += f"; step_us_late {statistics.median(steps[label]):g}"
        lines.append(
            f"| {label} | {workload} | {median:g} {keys[workload]}{ratio} | {len(values)} |"
        )
    return "\n".join(lines)


def _paired_ratios(results: list[dict[str, Any]], label: str) -> list[float]:
    """``label``'s W1 time per step over the FULL floor's in the same rep, for each rep
    that has both."""
    floor = {
        r["rep"]: float(r["w1_us_per_step"])
        for r in results
        if r.get("peer") == "baseline-full" and r.get("workload") == "w1" and "rep" in r
    }
    return [
        float(r["w1_us_per_step"]) / floor[r["rep"]]
        for r in results
        if r.get("peer") == label
        and r.get("workload") == "w1"
        and "w1_us_per_step" in r
        and floor.get(r.get("rep", -1))
    ]


if __name__ == "__main__":
    main()
