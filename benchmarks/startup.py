"""Import and CLI start-up time (DESIGN §11 target: <= 0.3 s), medians of fresh processes.

uv run python benchmarks/startup.py
"""

from __future__ import annotations

import shutil
import statistics
import subprocess
import sys
import time

REPS = 9


def timed(cmd: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True)
    return time.perf_counter() - t0


def main() -> None:
    py = sys.executable
    probes = {
        "python -c pass (interpreter floor)": [py, "-c", "pass"],
        "import plait": [py, "-c", "import plait"],
        "import plait.runtime + service + sqlite store": [
            py,
            "-c",
            "import plait.runtime, plait.application.service, plait.adapters.stores.sqlite",
        ],
    }
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
    for name, cmd in probes.items():
        times = [timed(cmd) for _ in range(REPS)]
        print(
            f"{name:50s} median {statistics.median(times) * 1e3:7.1f} ms "
            f"(min {min(times) * 1e3:.1f}, max {max(times) * 1e3:.1f})"
        )


if __name__ == "__main__":
    main()
