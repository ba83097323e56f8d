"""What each of a W1 run's commits writes to SQLite's WAL, by b-tree, and what a commit
with fsync costs per page it writes.

    uv run python benchmarks/commit_pages.py                 # 10 steps, on /dev/shm
    uv run python benchmarks/commit_pages.py --steps 150 --scratch /tmp
    uv run python benchmarks/commit_pages.py --fsync-pages 1,2,4,6,8 --scratch /tmp

- pages: W1's agent (``drv_plait.py``: echo tool, 1 KB results) runs ``--steps`` steps on
  a fresh store; the WAL's frames are then read back and each is named by the table or
  index it belongs to (SQLite's ``dbstat``), commit by commit (``--summary``: totals).
  A page written twice in one commit is counted twice, as the WAL holds it twice.
- ``--fsync-pages``: commits that each insert one row into N tables (one page per table,
  WAL, ``synchronous=FULL``) in a fresh file under ``--scratch``, 12 commits per process
  as in a 10-step W1 run, medians of ``--reps``: what one more page costs a commit on
  this disk. Run it on the disk W1's fsync figures come from (not tmpfs).

The WAL is checkpointed after ~1,000 frames: a longer run's figures cover its first
~1,000 frames only (the script says so when it happens).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sqlite3
import statistics
import struct
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
_FRAME_HEADER = 24
_WAL_HEADER = 32


def wal_frames(db: Path) -> list[tuple[int, bool]]:
    """``(page number, ends a commit)`` for each frame of ``db``'s WAL, in order."""
    data = (db.parent / (db.name + "-wal")).read_bytes()
    if len(data) < _WAL_HEADER:
        return []
    page_size = struct.unpack(">I", data[8:12])[0]
    salt = data[16:24]
    frames = []
    offset = _WAL_HEADER
    while offset + _FRAME_HEADER + page_size <= len(data):
        page, size_after = struct.unpack(">II", data[offset : offset + 8])
        if data[offset + 8 : offset + 16] != salt:  # left over from before a reset
            break
        frames.append((page, size_after != 0))
        offset += _FRAME_HEADER + page_size
    return frames


def page_owners(db: Path) -> dict[int, str]:
    """Page number -> the table or index it belongs to (``sqlite_schema``: page 1)."""
    conn = sqlite3.connect(db)
    try:
        return {page: name for name, page in conn.execute("SELECT name, pageno FROM dbstat")}
    except sqlite3.OperationalError as error:
        raise SystemExit(f"this Python's SQLite has no dbstat table ({error})") from None
    finally:
        conn.close()


def pages(args: argparse.Namespace) -> None:
    scratch = Path(tempfile.mkdtemp(prefix="plait-pages-", dir=args.scratch))
    try:
        frames, owners = asyncio.run(_pages_run(scratch / "w1.db", args.steps))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    commits: list[Counter[str]] = []
    current: Counter[str] = Counter()
    for page, ends in frames:
        current[owners.get(page, f"page {page}")] += 1
        if ends:
            commits.append(current)
            current = Counter()
    print(f"W1, {args.steps} steps: {len(commits)} commits, {len(frames)} pages in the WAL")
    if args.summary:
        total: Counter[str] = Counter()
        for c in commits:
            total.update(c)
        for name, n in total.most_common():
            print(f"  {name:34} {n:6} pages ({n / max(len(commits), 1):.2f} per commit)")
        return
    for n, c in enumerate(commits, 1):
        listed = ", ".join(k + (f" x{v}" if v > 1 else "") for k, v in sorted(c.items()))
        print(f"  commit {n:3}: {sum(c.values())} pages: {listed}")


async def _pages_run(db: Path, steps: int) -> tuple[list[tuple[int, bool]], dict[int, str]]:
    """The run's frames and the owner of each page, read while its store is still open
    (closing the last connection checkpoints the WAL and deletes it)."""
    sys.path.insert(0, str(HERE))
    import drv_plait  # parses no arguments at import

    store = drv_plait.CountingStore(str(db), io="inline")
    try:
        agent = drv_plait.build_agent(store, drv_plait.FakeModel(steps), 1024)
        session = await agent.create_session()
        first = wal_frames(db)
        await agent.send(session.id, "please call echo repeatedly")
        after = wal_frames(db)
        if after[: len(first)] != first:
            print("(the WAL was checkpointed during the run: the figures start after it)")
            first = []
        return after[len(first) :], page_owners(db)
    finally:
        await store.close()


def fsync_pages(args: argparse.Namespace) -> None:
    counts = [int(n) for n in args.fsync_pages.split(",")]
    scratch = Path(tempfile.mkdtemp(prefix="plait-fsync-", dir=args.scratch))
    db = scratch / "p.db"
    results: dict[int, list[float]] = {n: [] for n in counts}
    try:
        for _rep in range(args.reps):
            for n in counts:  # interleaved: the disk's pace drifts
                results[n].append(_commit_us(db, n, commits=12))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    print(f"commit with fsync by pages written ({args.reps} reps, 12 commits each, {args.scratch})")
    for n in counts:
        print(f"  {n} pages: {statistics.median(results[n]):7.1f} us per commit")


def _commit_us(db: Path, tables: int, *, commits: int) -> float:
    for suffix in ("", "-wal", "-shm"):
        (db.parent / (db.name + suffix)).unlink(missing_ok=True)
    conn = sqlite3.connect(db, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = FULL")
        for t in range(tables):
            conn.execute(f"CREATE TABLE t{t} (id INTEGER PRIMARY KEY, v TEXT)")
        times = []
        for _ in range(commits):
            start = time.perf_counter()
            conn.execute("BEGIN")
            for t in range(tables):
                conn.execute(f"INSERT INTO t{t} (v) VALUES (?)", ("x" * 300,))
            conn.execute("COMMIT")
            times.append(time.perf_counter() - start)
        return statistics.median(times) * 1e6
    finally:
        conn.close()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--steps", type=int, default=10, help="W1's steps (default 10)")
    parser.add_argument("--summary", action="store_true", help="totals by b-tree only")
    parser.add_argument("--scratch", default="/dev/shm" if os.path.isdir("/dev/shm") else None)
    parser.add_argument("--fsync-pages", help="time commits writing these page counts: 1,2,6")
    parser.add_argument("--reps", type=int, default=15)
    args = parser.parse_args()
    if args.fsync_pages:
        fsync_pages(args)
    else:
        pages(args)


if __name__ == "__main__":
    main()
