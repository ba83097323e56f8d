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

    uv run python benchmarks/w1_instructions.py --segments 10

splits one W1 window of that many steps (what ``compare.py --steps 10`` times) instead:
from ``send`` to the first model call (the run's start: its commit, the history read, the
first context), each step (one model call to the next), and from the last model call to
``send``'s return (the answer's commit, the run's end); once in a fresh process (as
``compare.py`` runs it) and once as the process's second run (``--warm``). The difference
of the two is what a process pays once: statements SQLite prepares for a new connection,
and code the interpreter runs before it has specialized it (CPython 3.11 quickens a
function after its eighth call, so a function called once per step runs unspecialized
for the first eight steps). The driver marks the segments with ``os.getppid()``
(``--markers``), before which callgrind dumps its counts (``--dump-before``); that needs
the interpreter's symbols (a build of pyenv's has them).
"""

from __future__ import annotations

import argparse
import operator
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
_SUMMARY = re.compile(r"^summary: (\d+)", re.M)


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


def _segments(driver: Path, steps: int, warm: bool, scratch: Path) -> list[int]:
    """The instruction counts between the markers of one W1 window (see ``--segments``)."""
    out = scratch / f"segments-{steps}-{int(warm)}"
    command = [
        "valgrind",
        "--tool=callgrind",
        "--dump-before=os_getppid",
        f"--callgrind-out-file={out}",
        sys.executable,
        str(driver),
        "w1",
        "--db",
        str(scratch / f"w1-{steps}-{int(warm)}.db"),
        "--steps",
        str(steps),
        "--markers",
        *(("--warm",) if warm else ()),
    ]
    env = os.environ | {"PYTHONHASHSEED": "0"}
    run = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    if run.returncode != 0:
        raise SystemExit(f"{driver} w1 --markers failed under valgrind:\n{run.stderr[-2000:]}")
    dumps = sorted(scratch.glob(f"{out.name}.*"), key=lambda dump: int(dump.suffix[1:]))
    counts = []
    for dump in dumps:
        found = _SUMMARY.search(dump.read_text(errors="replace"))
        counts.append(int(found.group(1)) if found else 0)
    # dump N holds what ran since dump N-1: the first is the process up to the window's
    # first marker; with --warm the first run's markers come first
    window = counts[-(steps + 2) :] if len(counts) >= steps + 3 else []
    if not window:
        raise SystemExit(
            f"{len(counts)} dumps, expected at least {steps + 3}: does this interpreter "
            "have symbols (os_getppid)?"
        )
    return window


def _print_segments(steps: int, scratch: Path, floor: Path | None) -> None:
    driver = HERE / "drv_plait.py"
    with ThreadPoolExecutor(max_workers=2) as pool:
        cold, warm = pool.map(
            lambda second: _segments(driver, steps, second, scratch), (False, True)
        )
        floor_steps = (
            None
            if floor is None
            else operator.sub(
                *pool.map(
                    # one hash seed: two whole runs' totals are compared (a random seed
                    # moves a run's total by ~0.5 M instructions, a quarter of 10 steps)
                    lambda count: _instructions(
                        floor, count, scratch, os.environ | {"PYTHONHASHSEED": "0"}
                    ),
                    (steps, 1),
                )
            )
        )
    names = ["start", *(f"step {n}" for n in range(1, steps + 1)), "end"]
    print(f"W1 window of {steps} steps, instructions per segment (callgrind):")
    print(f"  {'segment':10} {'first run':>12} {'second run':>12} {'difference':>12}")
    for name, first, second in zip(names, cold, warm, strict=True):
        print(f"  {name:10} {first:12,} {second:12,} {first - second:12,}")
    total_cold, total_warm = sum(cold), sum(warm)
    print(
        f"  {'window':10} {total_cold:12,} {total_warm:12,} {total_cold - total_warm:12,}"
        f"  ({total_cold / steps:,.0f} / {total_warm / steps:,.0f} per step)"
    )
    if floor_steps is not None and steps > 1:  # steps 2..N: a run of N steps less one of 1
        later = sum(cold[2:-1])
        print(
            f"  steps 2-{steps}: {later:,} against the floor's (baseline-full) {floor_steps:,}"
            f" ({later / floor_steps:.2f}x)"
        )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--short", type=int, default=20, help="steps of the short run")
    parser.add_argument("--long", type=int, default=220, help="steps of the long run")
    parser.add_argument("--before", type=Path, help="another checkout of plait (its src)")
    parser.add_argument(
        "--segments", type=int, metavar="STEPS", help="split one window of STEPS steps instead"
    )
    parser.add_argument(
        "--peer-bench", type=Path, default=HERE.parent.parent / "shared" / "peer-bench"
    )
    args = parser.parse_args()
    if args.long <= args.short:
        raise SystemExit("--long must be more steps than --short")
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed (apt-get install valgrind)")
    if args.segments is not None:
        if args.segments < 2:
            raise SystemExit("--segments must be at least 2 steps")
        shm = Path("/dev/shm")
        floor = args.peer_bench / "drv_baseline.py"
        with tempfile.TemporaryDirectory(dir=shm if shm.is_dir() else None) as tmp:
            _print_segments(args.segments, Path(tmp), floor if floor.is_file() else None)
        return
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
