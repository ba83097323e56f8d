"""Start-up time of fresh processes (DESIGN §11 targets: `import plait` and the CLI
<= 0.3 s, `Runtime.open` with defaults <= 0.1 s), medians of REPS processes.

uv run python benchmarks/startup.py [--reps N] [--against OTHER/src]

Each probe is a whole fresh process, timed from the parent (wall) and by its rusage (CPU:
user + system, which moves less than wall time on a shared machine). The processes run in
an empty directory with empty config and data directories and no PLAIT_* variables, so
"defaults" means the built-in ones: no plait.toml, the default SQLite store, the default
policy. The Runtime.open probe is exactly what a script using the Python API pays first:
import plait, open a runtime with defaults, close it, exit. Its store exists (the warm-up
run creates it); the first open of a new data directory also creates the store and is
shown separately. With the CLI installed, ``plait send`` of the demo's task (four built-in
tool calls with the scripted model) is timed too: what a CLI user's send costs beyond the
model's own time. ``--against`` also times the Runtime.open probe with plait imported
from another checkout's ``src`` (e.g. a worktree of main), interleaved with this one.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

# import plait, open with defaults, close, exit; prints the modules it loaded
OPEN = (
    "import asyncio, sys; import plait; "
    "asyncio.run(plait.Runtime.open().close()); "
    "print(len(sys.modules))"
)


def timed(cmd: list[str], env: dict[str, str], cwd: str) -> tuple[float, float, str]:
    """Wall time, CPU time (user + system) and stdout of one fresh process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(cmd, check=True, capture_output=True, env=env, cwd=cwd, text=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, done.stdout.strip()


def report(name: str, runs: list[tuple[float, float, str]]) -> None:
    walls = [wall for wall, _, _ in runs]
    cpu = statistics.median(c for _, c, _ in runs)
    modules = runs[-1][2]
    shown = f"; {modules} modules" if modules.isdigit() else ""
    print(
        f"{name:45s} median {statistics.median(walls) * 1e3:6.1f} ms "
        f"(min {min(walls) * 1e3:.1f}, max {max(walls) * 1e3:.1f}; "
        f"CPU {cpu * 1e3:.1f} ms{shown})"
    )


def interleave(other_src: str, env: dict[str, str], cwd: str, reps: int) -> None:
    """The Runtime.open probe with plait from ``other_src`` and from this checkout, one
    process of each in turn (so both see the same load)."""
    here = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src")
    cmd = [sys.executable, "-c", OPEN]
    sources = {"other": other_src, "this": here}
    envs = {name: {**env, "PYTHONPATH": src} for name, src in sources.items()}
    for chosen in envs.values():
        timed(cmd, chosen, cwd)  # warm-up: writes the bytecode cache
    runs: dict[str, list[tuple[float, float, str]]] = {name: [] for name in envs}
    for _ in range(reps):
        for name, chosen in envs.items():
            runs[name].append(timed(cmd, chosen, cwd))
    report(f"Runtime.open() plait from {other_src}"[:45], runs["other"])
    report("Runtime.open() plait from this checkout", runs["this"])


HERE = os.path.dirname(os.path.abspath(__file__))
DEMO = os.path.join(os.path.dirname(HERE), "examples")


def _sends(cli: str, env: dict[str, str], root: str, reps: int) -> list[tuple[float, float, str]]:
    """``plait send`` of the demo's task (a scripted model: read the config, search, read
    the code, edit it: four built-in tool calls, then the answer), each in a new session on
    its own copy of the demo's project; the session is made beforehand, not timed."""
    script = os.path.join(DEMO, "fix-the-tax.yaml")
    runs = []
    for rep in range(reps + 1):  # the first writes the bytecode cache
        workspace = os.path.join(root, f"shop-{rep}")
        shutil.copytree(os.path.join(DEMO, "shop"), workspace)
        made = subprocess.run(
            [cli, "sessions", "new", "--workspace", workspace, "--json"],
            check=True,
            capture_output=True,
            env=env,
            text=True,
        )
        session = json.loads(made.stdout)["session_id"]
        task = "Find out why the tests fail and fix it."
        cmd = [cli, "send", session, task, "--model", f"scripted:{script}"]
        timing = timed(cmd, env, workspace)
        if rep:
            runs.append(timing)
    return runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=11, help="processes per probe (>= 9)")
    parser.add_argument("--against", help="another checkout's src directory to compare with")
    options = parser.parse_args()
    reps = options.reps
    py = sys.executable
    probes = {
        "python -c pass (interpreter floor)": [py, "-c", "pass"],
        "python -c 'import asyncio' (asyncio floor)": [py, "-c", "import asyncio"],
        "import plait": [py, "-c", "import plait"],
        "Runtime.open() with defaults": [py, "-c", OPEN],
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
    root = tempfile.mkdtemp(prefix="plait-startup-")
    work = os.path.join(root, "work")
    os.mkdir(work)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PLAIT_")}
    env["XDG_DATA_HOME"] = os.path.join(root, "data")
    env["XDG_CONFIG_HOME"] = os.path.join(root, "config")
    # Measure what an installed package costs: with cached bytecode, not compiling every
    # module from source (as PYTHONDONTWRITEBYTECODE would make it), in a throw-away cache.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = os.path.join(root, "pycache")
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    try:
        for name, cmd in probes.items():
            timed(cmd, env, work)  # warm-up: writes the bytecode cache
            report(name, [timed(cmd, env, work) for _ in range(reps)])
        first = []
        for rep in range(reps):  # a new data directory each time: the store is created
            fresh = {**env, "XDG_DATA_HOME": os.path.join(root, f"fresh-{rep}")}
            first.append(timed([py, "-c", OPEN], fresh, work))
        report("Runtime.open() creating its store", first)
        if cli:
            report("plait send (the demo's task: 4 tool calls)", _sends(cli, env, root, reps))
        if options.against:
            interleave(options.against, env, work, reps)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
