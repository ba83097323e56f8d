"""Run plait's driver beside the peers' (../shared/peer-bench) and print one table.

    uv run python benchmarks/compare.py --reps 3            # plait + peers (if their venv exists)
    uv run python benchmarks/compare.py --reps 5 --no-peers  # plait only
    uv run python benchmarks/compare.py --reps 7 --no-peers --floor  # plait + the bare loops
    uv run python benchmarks/compare.py --reps 5 --no-peers --telemetry  # + W1, telemetry on

The peers' venv is made by ``bash ../shared/peer-bench/setup_venv.sh`` (outside the repo).
Each peer x workload runs in its own process, as in peer-bench's run_all.sh; W2 gets a
pristine copy of the built session each time. ``--floor`` runs the bare SQLite loops
(``baseline``, ``baseline-full``: standard library only) with this Python even without the
peers' venv, interleaved with plait, so W1 can be read as a ratio to the FULL floor measured
under the same load (DESIGN §11's target is that ratio). Raw JSONL and the table land in
``benchmarks/results/<UTC timestamp>/``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
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
    ("baseline-full", "drv_baseline.py", "full", "w1"),
    ("langgraph", "drv_langgraph.py", "sync", "w1,build,w2,w3"),
    ("langgraph-delta", "drv_langgraph.py", "delta", "w1,build,w2,w3"),
    ("openai-agents", "drv_openai_agents.py", "end", "w1,build,w2,w3"),
    ("pydantic-ai", "drv_pydantic_ai.py", "end", "w1,build,w2,w3"),
    ("pydantic-ai-step", "drv_pydantic_ai.py", "step", "w1"),
]


def _run(
    python: str, driver: Path, workload: str, db: Path, variant: str, env: dict[str, str]
) -> dict[str, Any]:
    out = subprocess.run(
        [python, str(driver), workload, "--db", str(db), "--variant", variant],
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
    p = argparse.ArgumentParser()
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--peer-bench", type=Path, default=DEFAULT_PEER_BENCH)
    p.add_argument(
        "--peervenv",
        type=Path,
        default=Path(os.environ.get("PEERVENV", Path(tempfile.gettempdir()) / "peervenv")),
    )
    p.add_argument("--no-peers", action="store_true")
    p.add_argument("--floor", action="store_true", help="run the bare loops (stdlib only)")
    p.add_argument(
        "--telemetry", action="store_true", help="also run W1 with telemetry on (plait-otel)"
    )
    a = p.parse_args()

    env = dict(os.environ)
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
    if a.telemetry:  # W1 again with OpenTelemetry on (spans and metrics, exported nowhere)
        configs.append(("plait-otel", sys.executable, HERE / "drv_plait.py", "telemetry", "w1"))
    peer_py = a.peervenv / "bin" / "python"
    if a.floor and not a.peer_bench.is_dir():
        raise SystemExit(f"--floor needs the peer benchmark at {a.peer_bench} (--peer-bench)")
    if a.floor and (a.no_peers or not peer_py.exists()):
        configs += [
            (lbl, sys.executable, a.peer_bench / drv, var, wls)
            for lbl, drv, var, wls in PEERS
            if lbl.startswith("baseline")
        ]
    if not a.no_peers:
        if peer_py.exists() and a.peer_bench.is_dir():
            configs += [
                (lbl, str(peer_py), a.peer_bench / drv, var, wls) for lbl, drv, var, wls in PEERS
            ]
        else:
            print(
                f"(no peer venv at {a.peervenv} or no {a.peer_bench}: plait only; "
                "make it with `bash ../shared/peer-bench/setup_venv.sh`)"
            )

    out_dir = HERE / "results" / datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    out_dir.mkdir(parents=True)
    raw = out_dir / "raw.jsonl"
    cfg = (
        f"cfg: steps={env['BENCH_STEPS']} history={env['BENCH_HISTORY']} "
        f"msg_bytes={env['BENCH_MSG_BYTES']} tool_bytes={env['BENCH_TOOL_BYTES']} reps={a.reps}"
    )
    (out_dir / "cfg.txt").write_text(cfg + "\n")
    print(cfg)
    scratch = Path(tempfile.mkdtemp(prefix="plait-bench-"))
    try:
        for rep in range(1, a.reps + 1):
            print(f"== rep {rep}/{a.reps}")
            for label, python, driver, variant, workloads in configs:
                d = scratch / label
                shutil.rmtree(d, ignore_errors=True)
                d.mkdir(parents=True)
                for w in workloads.split(","):
                    if w in ("w2", "w3"):
                        for suffix in ("", "-wal"):
                            src = d / f"hist.db{suffix}"
                            if src.exists():
                                shutil.copy(src, d / f"{w}.db{suffix}")
                    db = d / ("hist.db" if w == "build" else f"{w}.db")
                    # plait's W3 (fork) lives in its own script beside drv_plait.py.
                    drv = HERE / "fork_bench.py" if (label, w) == ("plait", "w3") else driver
                    res = _run(python, drv, w, db, variant, env)
                    res["peer"] = label
                    with raw.open("a") as f:
                        f.write(json.dumps(res) + "\n")
                    keys = (
                        "w1_us_per_step", "step_us_early", "step_us_late", "w2_ms", "w3_ms",
                        "build_s",
                    )  # fmt: skip
                    print(f"  {label} {w}: " + ", ".join(f"{k}={res[k]}" for k in keys if k in res))
                shutil.rmtree(d, ignore_errors=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    summarize = a.peer_bench / "summarize.py"
    if summarize.exists():
        table = subprocess.run(
            [sys.executable, str(summarize), str(raw)], capture_output=True, text=True, check=True
        ).stdout
        (out_dir / "table.md").write_text(table)
        print(table)
    print(f"raw results: {raw}")


if __name__ == "__main__":
    main()
