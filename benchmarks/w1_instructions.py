"""W1's cost per step in instructions executed, which the machine's load does not move.

    uv run python benchmarks/w1_instructions.py                    # plait and the floor
    uv run python benchmarks/w1_instructions.py --before /tmp/main # and another checkout

Each driver (``drv_plait.py w1``, tmpfs-backed when ``/dev/shm`` exists, and the bare
loop's ``drv_baseline.py w1 --variant full`` from ``--peer-bench``) runs in a fresh process
under valgrind's callgrind at ``--short`` and ``--long`` steps; the difference of the two
totals over the difference of the steps is what one more step executes: the process's
start, imports, set-up and first steps cancel out (the figure is the steady state; the
history the driver reads back after the run, two rows per step, is in it, for plait only).
The pairs run two at a time (one per core). A 1% change of a step's work shows in one run;
a wall-clock comparison on a shared machine needs many interleaved runs to see 5%
(``compare.py``). Needs valgrind (Debian's ``valgrind``).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
_COLLECTED = re.compile(r"Collected : (\d+)")


def _instructions(driver: Path, steps: int, scratch: Path, env: dict[str, str]) -> int:
    db = scratch / f"{driver.stem}-{steps}-{os.urandom(4).hex()}.db"
    command = [
        "valgrind",
        "--tool=callgrind",
        "--callgrind-out-file=/dev/null",
        sys.executable,
        str(driver),
        "w1",
        "--db",
        str(db),
        "--steps",
        str(steps),
        *(("--variant", "full") if driver.name == "drv_baseline.py" else ()),
    ]
    out = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    found = _COLLECTED.search(out.stderr)
    if out.returncode != 0 or found is None:
        raise SystemExit(
            f"{driver} w1 --steps {steps} failed under valgrind:\n{out.stderr[-2000:]}"
        )
    return int(found.group(1))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--short", type=int, default=20, help="steps of the short run")
    parser.add_argument("--long", type=int, default=220, help="steps of the long run")
    parser.add_argument("--before", type=Path, help="another checkout of plait (its src)")
    parser.add_argument(
        "--peer-bench", type=Path, default=HERE.parent.parent / "shared" / "peer-bench"
    )
    args = parser.parse_args()
    if args.long <= args.short:
        raise SystemExit("--long must be more steps than --short")
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed (apt-get install valgrind)")
    labels: list[tuple[str, Path, dict[str, str]]] = [("plait", HERE / "drv_plait.py", {})]
    if args.before is not None:
        before = args.before.resolve()
        if not (before / "src" / "plait").is_dir():
            raise SystemExit(f"--before {args.before}: no src/plait there")
        labels.append(
            (
                "plait-before",
                before / "benchmarks" / "drv_plait.py",
                {"PYTHONPATH": f"{before}/src"},
            )
        )
    floor = args.peer_bench / "drv_baseline.py"
    if floor.is_file():
        labels.append(("floor (baseline-full)", floor, {}))
    else:
        print(f"no floor: {floor} not found (--peer-bench)", file=sys.stderr)
    shm = Path("/dev/shm")
    with tempfile.TemporaryDirectory(dir=shm if shm.is_dir() else None) as tmp:
        jobs = [
            (label, driver, steps, os.environ | extra)
            for label, driver, extra in labels
            for steps in (args.short, args.long)
        ]
        with ThreadPoolExecutor(max_workers=2) as pool:
            counts = list(
                pool.map(lambda job: _instructions(job[1], job[2], Path(tmp), job[3]), jobs)
            )
    per_step = {
        label: (counts[2 * n + 1] - counts[2 * n]) / (args.long - args.short)
        for n, (label, _driver, _env) in enumerate(labels)
    }
    floor_per_step = per_step.get("floor (baseline-full)")
    print(f"W1 instructions per step (callgrind, steps {args.short} -> {args.long}):")
    for label, value in per_step.items():
        ratio = f" ({value / floor_per_step:.2f}x the floor)" if floor_per_step else ""
        print(f"  {label:24} {value:12,.0f}{ratio}")


if __name__ == "__main__":
    main()
