"""``plait serve`` or ``plait worker`` on SQLite killed mid-run and started again: the
run's lease names a process of this host that is gone, so the new worker takes the run
over at once instead of after the lease (a minute by default)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from plait.runtime import Runtime

# A process that claims the queued run as a worker would (its owner names this host and
# its pid), says so, and waits to be killed.
HOLDER = """
import asyncio, sys, time
from plait.adapters.system import process_owner
from plait.runtime import Runtime
from plait.testing import FunctionModel

async def hang(request):
    await asyncio.sleep(3600)

async def main():
    owner = process_owner()
    model = FunctionModel(hang, name="scripted:m")  # the worker's model
    rt = Runtime.open(db=sys.argv[1], model=model, owner=owner, lease_seconds=3600, tools=())
    now = time.time()
    claimed = await rt.store.claim_queued_run(owner=owner, now=now, expires_at=now + 3600)
    driving = asyncio.ensure_future(rt.service.execute(claimed))
    while (await rt.store.get_run(claimed.id)).status.value != "running":
        await asyncio.sleep(0.01)
    print(claimed.id, owner, flush=True)
    await driving

asyncio.run(main())
"""


def _submit(url: str) -> str:
    async def go() -> str:
        rt = Runtime.open(db=url, tools=())
        try:
            session = await rt.service.create_session(owner="ana")
            return (await rt.service.submit(session.id, "hello")).id
        finally:
            await rt.close()

    return asyncio.run(go())


def _run(url: str, run_id: str) -> tuple[str, str | None]:
    async def go() -> tuple[str, str | None]:
        rt = Runtime.open(db=url, store_only=True)
        try:
            run = await rt.store.get_run(run_id)
            return run.status.value, run.lease.owner if run.lease else None
        finally:
            await rt.close()

    return asyncio.run(go())


@pytest.mark.slow
def test_a_run_held_by_a_killed_process_is_taken_over_at_once(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'plait.db'}"
    script = tmp_path / "m.json"
    script.write_text(json.dumps({"version": 1, "model": "m", "assistant": [{"text": "hi there"}]}))
    run_id = _submit(url)
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, url], stdout=subprocess.PIPE, text=True
    )
    assert holder.stdout is not None
    held, owner = holder.stdout.readline().split()
    assert held == run_id and f":{holder.pid}:" in owner
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    holder.stdout.close()
    assert _run(url, run_id) == ("running", owner)  # leased for another hour

    env = {k: v for k, v in os.environ.items() if not k.startswith("PLAIT_")}
    env.update(PLAIT_DB=url, PLAIT_MODEL=f"scripted:{script}")
    worker = subprocess.Popen(
        [sys.executable, "-m", "plait", "worker", "--json"],
        env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    deadline = time.monotonic() + 20  # the lease would hold it for an hour
    try:
        while (done := _run(url, run_id)[0] == "completed") is False:
            if worker.poll() is not None or time.monotonic() > deadline:
                break
            time.sleep(0.1)
    finally:
        if worker.poll() is None:
            worker.send_signal(signal.SIGTERM)
        _, err = worker.communicate(timeout=30)
    assert done, (_run(url, run_id), err)
    assert "a process of this host that is gone" in err, err
