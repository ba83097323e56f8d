"""A second process for the cross-process store tests (run with ``python -m``).

``race URL NAME START``: wait for START to exist, then commit one message at version 0.
``loop URL NAME START N``: wait, then append N messages, re-reading the version after each
conflict. Prints one JSON line with the outcome.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from plait.adapters.stores import open_store
from plait.application.ports import Commit
from plait.domain.errors import ConflictError
from plait.domain.messages import UserMessage


def child_env() -> dict[str, str]:
    """Environment for a child that can import both ``plait`` and ``tests``."""
    import plait
    import tests

    paths = [str(Path(next(iter(plait.__path__))).parent), str(Path(tests.__file__).parents[1])]
    old = os.environ.get("PYTHONPATH")
    return {**os.environ, "PYTHONPATH": os.pathsep.join([*paths, *([old] if old else [])])}


def run_workers(url: str, tmp: Path, mode: str, *, n: int = 0) -> list[dict[str, object]]:
    """Run two workers ``a`` and ``b`` against ``url``, released together; their results."""
    start = tmp / "start"
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "tests.stores.worker", mode, url, name, str(start), str(n)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=child_env(),
            text=True,
        )
        for name in ("a", "b")
    ]
    deadline = time.monotonic() + 60
    while not all((tmp / f"ready-{name}").exists() for name in ("a", "b")):
        if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
            break
        time.sleep(0.005)
    start.touch()
    results = []
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, f"worker failed ({p.returncode}):\n{err}"
        results.append(json.loads(out.strip().splitlines()[-1]))
    return results


def _ready(start: Path, name: str) -> None:
    (start.parent / f"ready-{name}").touch()


def _wait(start: Path) -> None:
    deadline = time.monotonic() + 30
    while not start.exists():
        if time.monotonic() > deadline:
            raise SystemExit("start signal never came")
        time.sleep(0.001)


async def _race(url: str, name: str, start: Path) -> dict[str, object]:
    store = open_store(url)
    try:
        _ready(start, name)
        _wait(start)
        msg = UserMessage(id=f"{name}-0", text=name, created_at=0.0)
        try:
            r = await store.commit(Commit(session_id="s1", expected_version=0, messages=(msg,)))
        except ConflictError as e:
            return {"outcome": "conflict", "code": e.code, "details": e.details}
        return {"outcome": "ok", "version": r.version}
    finally:
        await store.close()


async def _loop(url: str, name: str, start: Path, n: int) -> dict[str, object]:
    store = open_store(url)
    conflicts = done = 0
    try:
        _ready(start, name)
        _wait(start)
        while done < n:
            version = (await store.get_session("s1")).version
            msg = UserMessage(id=f"{name}-{done}", text=name, created_at=float(done))
            try:
                await store.commit(
                    Commit(session_id="s1", expected_version=version, messages=(msg,))
                )
            except ConflictError:
                conflicts += 1
                continue
            done += 1
        return {"outcome": "ok", "conflicts": conflicts}
    finally:
        await store.close()


def main(argv: list[str]) -> None:
    mode, url, name, start = argv[0], argv[1], argv[2], Path(argv[3])
    if mode == "race":
        result = asyncio.run(_race(url, name, start))
    else:
        result = asyncio.run(_loop(url, name, start, int(argv[4])))
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
