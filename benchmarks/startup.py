"""Import and CLI start-up time (DESIGN §11 target: <= 0.3 s), medians of fresh processes.

uv run python benchmarks/startup.py
"""

from __future__ import annotations

import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

REPS = 9


def timed(cmd: list[str], env: dict[str, str] | None = None) -> tuple[float, float]:
    """Wall time and CPU time (user + system) of one fresh process: on a loaded machine
    the CPU time moves less than the wall time."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True, env=env)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def main() -> None:
    py = sys.executable
    probes = {
        "python -c pass (interpreter floor)": [py, "-c", "pass"],
        "import plait": [py, "-c", "import plait"],
        "import plait.runtime + service + sqlite store": [
            py,
            "-c",
            "import plait.runtime, plait.application.service, plait.adapters.stores.sqlite.store",
        ],
    }
    # Runtime.open with defaults (the default SQLite store under XDG_DATA_HOME, the
    # default policy), then close: what a script using the Python API pays first.
    probes["Runtime.open() with defaults"] = [
        py,
        "-c",
        "import asyncio; from plait.runtime import Runtime; asyncio.run(Runtime.open().close())",
    ]
    cli = shutil.which("plait")
    if cli:
        probes["plait --help"] = [cli, "--help"]
        probes["plait sessions list (memory store)"] = [
            cli,
            "sessions",
            "list",
            "--db",
            "memory://",
        ]
    data = tempfile.mkdtemp(prefix="plait-startup-")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PLAIT_")}
    env["XDG_DATA_HOME"] = data
    # Measure what an installed package costs: with cached bytecode, not compiling every
    # module from source (as PYTHONDONTWRITEBYTECODE would make it), in a throw-away cache.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = os.path.join(data, "pycache")
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    for name, cmd in probes.items():
        timed(cmd, env)  # warm-up: writes the bytecode cache
        runs = [timed(cmd, env) for _ in range(REPS)]
        times = [wall for wall, _ in runs]
        cpu = statistics.median(c for _, c in runs)
        print(
            f"{name:50s} median {statistics.median(times) * 1e3:7.1f} ms "
            f"(min {min(times) * 1e3:.1f}, max {max(times) * 1e3:.1f}; "
            f"CPU {cpu * 1e3:.1f} ms)"
        )
    shutil.rmtree(data, ignore_errors=True)


if __name__ == "__main__":
    main()
