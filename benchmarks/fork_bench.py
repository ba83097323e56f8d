"""W3 of ../shared/peer-bench (fork a 5,000-message session at 2,500, fresh process), and
how the fork's cost scales with the prefix and with the parent's length.

    uv run python benchmarks/drv_plait.py build --db /tmp/w3.db  # the 5,000-message session
    uv run python benchmarks/fork_bench.py w3 --db /tmp/w3.db    # one run, peer protocol: JSON line
    uv run python benchmarks/fork_bench.py scale --reps 5 # the scaling table (--big: 500k)

``w3`` expects the session ``ses_main`` built by ``drv_plait.py build`` (as W2 does) and
writes into the file it is given (``compare.py`` hands it a copy). The store calls SQLite
inline, as ``plait sessions fork`` (a process that does one thing, ``Runtime.open``'s
default) does, not through the I/O thread a service uses. Timed from opening the
store until the branch holds the prefix plus one new user message (both commits durable,
SQLite WAL, synchronous=FULL): ``ForkService.fork_session`` (access check, cut-point check
on a window around the fork point, one transaction with the session row, the segments
referring to the source's prefix (no row per message), and the request record) then one
append. The id of the fork-point message is looked up beforehand, untimed (LangGraph's
driver likewise knows its checkpoint id). Both histories are checked afterwards.
"""

from __future__ import annotations

import time

T_PROCESS_START = time.perf_counter()

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import resource  # noqa: E402
import shutil  # noqa: E402
import sqlite3  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

T_IMPORT_START = time.perf_counter()
import plait  # noqa: E402
from plait.adapters.stores.sqlite.store import SqliteStore, load_deferred  # noqa: E402
from plait.adapters.system import SystemClock  # noqa: E402
from plait.application.fork import ForkService  # noqa: E402
from plait.application.ports import Commit  # noqa: E402
from plait.domain.messages import UserMessage  # noqa: E402

# The store imports its row codec, shared state and write path (and each capability's
# module) at its first read or write, so that opening a store stays cheap (Runtime.open's
# start-up). The workloads leave Python imports out of their windows, as the peers' drivers
# import their frameworks at the top: those are imported here, and counted in import_s.
load_deferred()

T_IMPORTED = time.perf_counter()

HERE = Path(__file__).resolve().parent


def _message_id_at(db: str, seq: int) -> str:
    build = f"build it first: uv run python benchmarks/drv_plait.py build --db {db}"
    if not Path(db).is_file():
        raise SystemExit(f"{db} does not exist; {build}")
    conn = sqlite3.connect(f"file:{Path(db).absolute()}?mode=ro", uri=True)  # reads only
    try:
        row = conn.execute(
            "SELECT message_id FROM session_messages WHERE session_id = 'ses_main' AND seq = ?",
            (seq,),
        ).fetchone()
    except sqlite3.Error as error:
        message = f"{db} is not a plait store with a session ses_main ({error}); {build}"
        raise SystemExit(message) from None
    finally:
        conn.close()
    if row is None:
        raise SystemExit(f"{db} has no message #{seq} in ses_main; {build}")
    return str(row[0])


async def w3(a: argparse.Namespace, res: dict[str, Any]) -> None:
    through = _message_id_at(a.db, a.fork_at)
    t0 = time.perf_counter()
    store = SqliteStore(a.db, io="inline")  # as `plait sessions fork` (Runtime.open) does
    forks = ForkService(store=store, clock=SystemClock())
    t_open = time.perf_counter()
    result = await forks.fork_session("ses_main", through, f"w3-{os.getpid()}-{time.time_ns()}")
    t_fork = time.perf_counter()
    branch = result.branch
    new = UserMessage(
        id=f"msg_w3_{os.getpid()}", text="forked: a different question", created_at=0.0
    )
    await store.commit(
        Commit(session_id=branch.id, expected_version=branch.version, messages=(new,))
    )
    t1 = time.perf_counter()
    in_branch = await store.read_messages(branch.id)
    in_main = await store.read_messages("ses_main")
    assert len(in_branch) == a.fork_at + 1, len(in_branch)
    assert in_branch[-1].message == new
    assert [sm.message.id for sm in in_branch[:-1]] == [
        sm.message.id for sm in in_main[: a.fork_at]
    ]
    assert len(in_main) == a.history, len(in_main)
    await store.close()
    res.update(
        w3_ms=round((t1 - t0) * 1e3, 2),
        open_ms=round((t_open - t0) * 1e3, 2),
        fork_ms=round((t_fork - t_open) * 1e3, 2),
        append_ms=round((t1 - t_fork) * 1e3, 2),
        fork_messages=len(in_branch),
        main_messages=len(in_main),
    )


def _driver(a: argparse.Namespace) -> None:
    import asyncio

    res: dict[str, Any] = {
        "peer": "plait",
        "version": f"plait {plait.__version__} / sqlite {sqlite3.sqlite_version}",
        "workload": "w3",
        "import_s": round(T_IMPORTED - T_IMPORT_START, 4),
        "persistence": "SqliteStore: WAL, synchronous=FULL; the branch shares message bodies "
        "by segments referring to the prefix (one transaction), then one append",
    }
    asyncio.run(w3(a, res))
    res["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0, 1)
    res["process_wall_s"] = round(time.perf_counter() - T_PROCESS_START, 3)
    print(json.dumps(res), flush=True)


# --- scaling ----------------------------------------------------------------------------------


def _build(db: Path, history: int) -> None:
    subprocess.run(
        [
            sys.executable,
            str(HERE / "drv_plait.py"),
            "build",
            "--db",
            str(db),
            "--history",
            str(history),
        ],
        check=True,
        capture_output=True,
    )


def _one(db: Path, scratch: Path, history: int, fork_at: int) -> dict[str, Any]:
    run_db = scratch / "run.db"
    for suffix in ("", "-wal", "-shm"):
        Path(str(run_db) + suffix).unlink(missing_ok=True)
        src = Path(str(db) + suffix)
        if src.exists():
            shutil.copy(src, str(run_db) + suffix)
    # The copy leaves up to ~360 MB (500k messages) of dirty pages; without this the fork's
    # fsync waits for their writeback, a cost of the benchmark's set-up, not of the fork.
    os.sync()
    out = subprocess.run(
        [sys.executable, __file__, "w3", "--db", str(run_db), "--history", str(history),
         "--fork-at", str(fork_at)],
        check=True,
        capture_output=True,
        text=True,
    )  # fmt: skip
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def _baseline(peer_bench: Path, scratch: Path) -> float | None:
    """The bare SQLite loop's W3 (INSERT … SELECT of the bodies + one INSERT), same run."""
    driver = peer_bench / "drv_baseline.py"
    if not driver.exists():
        return None
    db = scratch / "baseline.db"
    for suffix in ("", "-wal", "-shm"):
        Path(str(db) + suffix).unlink(missing_ok=True)
    for w in ("build", "w3"):
        out = subprocess.run(
            [sys.executable, str(driver), w, "--db", str(db), "--variant", "normal"],
            check=True,
            capture_output=True,
            text=True,
            cwd=peer_bench,
        )
    return float(json.loads(out.stdout.strip().splitlines()[-1])["w3_ms"])


def _scale(a: argparse.Namespace) -> None:
    cases = [(5000, 500), (5000, 2500), (5000, 5000), (50000, 2500), (50000, 25000)]
    if a.big:  # the third size (building it takes a while)
        cases.append((500000, 250000))
    scratch = Path(tempfile.mkdtemp(prefix="plait-w3-"))
    base: list[float] = []
    try:
        built: dict[int, Path] = {}
        for history in sorted({h for h, _ in cases}):
            built[history] = scratch / f"hist{history}.db"
            _build(built[history], history)
        rows: dict[tuple[int, int], list[dict[str, Any]]] = {c: [] for c in cases}
        for _ in range(a.reps):  # interleaved, so drift hits every case alike
            for history, fork_at in cases:
                rows[(history, fork_at)].append(_one(built[history], scratch, history, fork_at))
            b = _baseline(a.peer_bench, scratch)
            if b is not None:
                base.append(b)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if base:
        print(f"bare SQLite loop (peer-bench baseline, synchronous=NORMAL), 5,000 at 2,500: "
              f"{statistics.median(base):.2f} ms median")  # fmt: skip
    print(f"W3 scaling, medians of {a.reps} fresh processes (ms; SQLite WAL, synchronous=FULL)")
    print("| parent | fork at | total W3 | open | fork | append |")
    print("|---|---|---|---|---|---|")
    for (history, fork_at), runs in rows.items():
        med = {
            k: statistics.median(r[k] for r in runs)
            for k in ("w3_ms", "open_ms", "fork_ms", "append_ms")
        }
        print(
            f"| {history:,} | {fork_at:,} | {med['w3_ms']:.2f} | {med['open_ms']:.2f} | "
            f"{med['fork_ms']:.2f} | {med['append_ms']:.2f} |"
        )


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("workload", choices=["w3", "scale"])
    p.add_argument("--db")
    p.add_argument("--history", type=int, default=int(os.environ.get("BENCH_HISTORY", 5000)))
    p.add_argument("--fork-at", type=int, default=int(os.environ.get("BENCH_FORK_AT", 2500)))
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--big", action="store_true", help="scale: also 500,000 forked at 250,000")
    p.add_argument("--variant", default="")
    p.add_argument("--peer-bench", type=Path, default=HERE.parent.parent / "shared" / "peer-bench")
    a = p.parse_args()
    if a.workload == "scale":
        _scale(a)
    elif not a.db:
        p.error("w3 needs --db (a store built by drv_plait.py build)")
    else:
        _driver(a)


if __name__ == "__main__":
    main()
