"""Workers live through store outages (issue 20 item 2): found on main, ``pg_ctl restart
-m immediate`` made every ``plait worker`` exit (idle ones too) and a full disk stopped
``serve``'s built-in worker for good. Here the fault is real each time: a PostgreSQL
cluster of the test's own is stopped or restarted, and a SQLite store's file is capped
at its size (``PRAGMA max_page_count``: a commit that needs a page fails with
``SQLITE_FULL``, "database or disk is full"). The worker must not stop, must log the
outage once, and every run submitted must complete once the store is back.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from plait.adapters.stores.postgres.store import PostgresStore
from plait.adapters.stores.sqlite.store import SqliteStore
from plait.adapters.system import RandomIds, SystemClock
from plait.application.ports import Tool, ToolInvocation, ToolOutput
from plait.application.service import AgentService
from plait.application.worker import Backoff, Worker
from plait.domain.errors import StoreUnavailableError
from plait.domain.runs import Run, RunStatus
from plait.domain.tools import EffectClass, ToolSpec
from plait.entrypoints.http.events import encode_event
from plait.testing import FunctionModel, echo_tool
from plait.testing.postgres import Cluster
from tests.pg import own_cluster
from tests.service.test_worker import Model


@pytest.fixture(name="pg")
def _pg() -> Iterator[Cluster]:
    yield from own_cluster()


def service(store: Any, owner: str = "w1") -> AgentService:
    return AgentService.build(
        store=store,
        artifacts=store,
        model=FunctionModel(Model(), name="m"),
        tools=[echo_tool().tool],
        clock=SystemClock(),
        ids=RandomIds(),
        owner=owner,
        lease_seconds=1.0,
    )


async def submit(svc: AgentService, n: int) -> list[Run]:
    runs = []
    for _ in range(n):
        s = await svc.create_session(owner="ana")
        runs.append(await svc.submit(s.id, "go"))
    return runs


async def all_completed(store: Any, runs: list[Run], seconds: float = 60.0) -> None:
    async with asyncio.timeout(seconds):
        while True:
            try:
                found = [await store.get_run(r.id) for r in runs]
            except Exception:  # the store is still coming back
                found = []
            if found and all(r.status is RunStatus.COMPLETED for r in found):
                break
            await asyncio.sleep(0.05)
    for r in runs:  # nothing lost, nothing twice: exactly the run's messages
        kinds = [m.message.kind for m in await store.read_messages(r.session_id)]
        assert kinds == ["user", "assistant", "tool_result", "assistant"], kinds


def outage_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "plait.worker" and r.getMessage().startswith("store unavailable")
    ]


def interrupted(caplog: pytest.LogCaptureFixture) -> bool:
    return any(
        r.getMessage().startswith("run interrupted by a store outage") for r in caplog.records
    )


@pytest.mark.slow
def test_idle_worker_survives_pg_server_down(pg: Cluster, caplog: pytest.LogCaptureFixture) -> None:
    """An idle worker polls while the server is down: it backs off, logs the outage
    once, and claims what is submitted once the server is back."""
    caplog.set_level(logging.INFO, logger="plait.worker")

    async def go() -> None:
        store = PostgresStore(pg.url, wait_seconds=1.0)
        svc = service(store)
        worker = Worker(service=svc, queue=store, encode=encode_event, poll_seconds=0.02)
        stop = asyncio.Event()
        task = asyncio.create_task(worker.run(stop))
        try:
            await all_completed(store, await submit(svc, 2))
            pg.stop("immediate")
            await asyncio.sleep(3.0)  # several failed polls
            assert not task.done(), "the worker stopped on the outage"
            pg.start()
            await all_completed(store, await submit_when_back(svc, 3))
            assert not task.done()
        finally:
            stop.set()
            stats = await task
            await store.close()
        assert stats.outages == 1
        assert len(outage_warnings(caplog)) == 1
        assert any("available again" in r.getMessage() for r in caplog.records)

    asyncio.run(go())


async def submit_when_back(svc: AgentService, n: int) -> list[Run]:
    async with asyncio.timeout(60):
        while True:
            try:
                await svc.store.list_sessions(limit=1)
                return await submit(svc, n)
            except Exception:
                await asyncio.sleep(0.2)


@pytest.mark.slow
def test_workers_survive_pg_restart_immediate_under_load(pg: Cluster) -> None:
    """Two workers drive 30 runs; the server restarts with ``-m immediate`` twice in
    the middle. Both workers go on, and every run completes with exactly its messages
    (a run cut off mid-way is recovered once its lease is released or expires)."""

    async def go() -> None:
        stores = [PostgresStore(pg.url) for _ in range(3)]
        submitter = service(stores[0], owner="api")
        workers = [
            Worker(
                service=service(s, owner=f"w{i}"),
                queue=s,
                encode=encode_event,
                concurrency=3,
                poll_seconds=0.02,
            )
            for i, s in enumerate(stores[1:])
        ]
        stop = asyncio.Event()
        tasks = [asyncio.create_task(w.run(stop)) for w in workers]
        try:
            runs = await submit(submitter, 30)
            for _ in range(2):
                await asyncio.sleep(0.3)
                pg.restart("immediate")
            await all_completed(stores[0], runs)
            assert not any(t.done() for t in tasks), "a worker stopped on the restart"
        finally:
            stop.set()
            await asyncio.gather(*tasks)
            for s in stores:
                await s.close()

    asyncio.run(go())


async def cap_pages(store: SqliteStore, *, extra: int) -> None:
    """``PRAGMA max_page_count``: the file may grow by ``extra`` pages (0: it is full)."""

    def cap(conn: sqlite3.Connection) -> None:
        pages = conn.execute("PRAGMA page_count").fetchone()[0]
        conn.execute(f"PRAGMA max_page_count = {pages + extra}")

    await store._db.read(cap)


@pytest.mark.slow
def test_builtin_worker_survives_sqlite_disk_full(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The worker's own claims fail on the full disk (its lease owner's name is long, so
    a claim needs a new page, as every write does on a disk that is really full); it
    goes on polling, and once space is back every queued run completes."""
    caplog.set_level(logging.INFO, logger="plait.worker")

    async def go() -> None:
        store = SqliteStore(tmp_path / "plait.db")
        svc = service(store, owner="worker-" + "w" * 6000)
        runs = await submit(svc, 4)
        await cap_pages(store, extra=0)
        worker = Worker(service=svc, queue=store, encode=encode_event, poll_seconds=0.02)
        stop = asyncio.Event()
        task = asyncio.create_task(worker.run(stop))
        try:
            async with asyncio.timeout(10):
                while not outage_warnings(caplog):  # noqa: ASYNC110
                    await asyncio.sleep(0.02)
            await asyncio.sleep(0.5)
            assert not task.done(), "the worker stopped on the full disk"
            statuses = [(await store.get_run(r.id)).status for r in runs]
            assert statuses == [RunStatus.QUEUED] * 4
            await cap_pages(store, extra=1_000_000)
            await all_completed(store, runs)
        finally:
            stop.set()
            stats = await task
            await store.close()
        assert stats.outages == 1 and stats.finished == {"completed": 4}
        assert len(outage_warnings(caplog)) == 1

    asyncio.run(go())


def test_backoff_doubles_to_its_ceiling_with_jitter_and_resets() -> None:
    backoff = Backoff(first=0.1, most=0.8)
    delays = [backoff.delay() for _ in range(6)]
    ceilings = [0.1, 0.2, 0.4, 0.8, 0.8, 0.8]
    assert all(c / 2 <= d <= c for d, c in zip(delays, ceilings, strict=True))
    backoff.reset()
    assert 0.05 <= backoff.delay() <= 0.1


def test_side_effect_in_flight_at_a_full_disk_ends_awaiting_resolution(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """As before the fix, a side effect whose result could not be stored is never run
    again: the disk fills while the call runs, its result's commit fails, and once space
    is back the worker releases the run and recovers it as ``awaiting_resolution``."""
    caplog.set_level(logging.INFO, logger="plait.worker")

    async def go() -> None:
        store = SqliteStore(tmp_path / "plait.db")
        calls: list[str] = []

        async def send(invocation: ToolInvocation) -> ToolOutput:
            calls.append(invocation.idempotency_key)
            await cap_pages(store, extra=0)  # the disk fills meanwhile
            return ToolOutput(content="sent " + "x" * 20_000)  # its result needs pages

        spec = ToolSpec(
            name="echo",
            description="Send something (not idempotent).",
            parameters={"type": "object", "properties": {"text": {"type": "string"}}},
            effect=EffectClass.SIDE_EFFECT,
        )
        svc = AgentService.build(
            store=store,
            artifacts=store,
            model=FunctionModel(Model(), name="m"),
            tools=[Tool(spec=spec, execute=send)],
            clock=SystemClock(),
            ids=RandomIds(),
            owner="w1",
            lease_seconds=1.0,
        )
        [run] = await submit(svc, 1)
        worker = Worker(service=svc, queue=store, encode=encode_event, poll_seconds=0.02)
        stop = asyncio.Event()
        task = asyncio.create_task(worker.run(stop))
        try:
            async with asyncio.timeout(10):
                while not interrupted(caplog):  # noqa: ASYNC110
                    await asyncio.sleep(0.02)
            await cap_pages(store, extra=1_000_000)
            async with asyncio.timeout(30):
                while (await store.get_run(run.id)).status is not RunStatus.AWAITING_RESOLUTION:  # noqa: ASYNC110
                    await asyncio.sleep(0.05)
        finally:
            stop.set()
            await task
            await store.close()
        assert len(calls) == 1  # never run a second time
        assert not task.exception()

    asyncio.run(go())


@pytest.mark.slow
def test_plait_worker_process_survives_pg_restart_immediate(tmp_path: Path, pg: Cluster) -> None:
    """Found: ``pg_ctl restart -m immediate`` made every ``plait worker`` exit with
    status 2, idle ones too, and queued runs stalled until someone restarted them. The
    real command lives through two restarts and drains on SIGTERM with status 0."""
    script = tmp_path / "m.json"
    script.write_text(json.dumps({"version": 1, "assistant": [{"text": "hi"}] * 5}))
    first = asyncio.run(submit_one(pg.url))
    env = {k: v for k, v in os.environ.items() if not k.startswith("PLAIT_")}
    env.update(PLAIT_DB=pg.url, PLAIT_MODEL=f"scripted:{script}", PLAIT_GRACE_SECONDS="5")
    proc = subprocess.Popen(
        [sys.executable, "-m", "plait", "worker", "--json"],
        env=env,
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_completed(pg.url, first, proc)
        for _ in range(2):
            pg.restart("immediate")
            time.sleep(1.0)  # the idle worker polls meanwhile
            assert proc.poll() is None, proc.communicate()
        wait_completed(pg.url, asyncio.run(submit_one(pg.url)), proc)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err
    stats = json.loads(out)
    assert stats["claimed"] == 2 and stats["finished"] == {"completed": 2}
    assert "outages" in stats  # how many it lived through (0 if every wait was enough)


async def submit_one(url: str) -> str:
    async with asyncio.timeout(60):
        while True:
            store = PostgresStore(url)
            try:
                svc = service(store)
                session = await svc.create_session(owner="ana")
                return (await svc.submit(session.id, "hello")).id
            except StoreUnavailableError:
                await asyncio.sleep(0.2)
            finally:
                await store.close()


def wait_completed(url: str, run_id: str, proc: subprocess.Popen[str]) -> None:
    async def status() -> RunStatus:
        store = PostgresStore(url)
        try:
            return (await store.get_run(run_id)).status
        except StoreUnavailableError:
            return RunStatus.RUNNING
        finally:
            await store.close()

    deadline = time.monotonic() + 60
    while asyncio.run(status()) is not RunStatus.COMPLETED:
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the worker did not run the queued run"
        time.sleep(0.1)


@pytest.mark.slow
def test_the_api_process_worker_is_replaced_when_it_stops_on_another_error(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Found: ``serve``'s built-in worker stopped for good while the API went on
    answering 202. A worker that stops on an error other than an outage (which it lives
    through by itself) is logged and replaced after a backoff."""
    from plait.entrypoints.http.server import _supervise

    started: list[int] = []

    class Worker1:
        async def run(self, stop: asyncio.Event) -> None:
            started.append(len(started))
            if len(started) == 1:
                raise RuntimeError("an unexpected failure")
            await stop.wait()

    async def go() -> None:
        stop = asyncio.Event()
        task = asyncio.create_task(_supervise(Worker1, stop))
        async with asyncio.timeout(10):
            while len(started) < 2:  # noqa: ASYNC110
                await asyncio.sleep(0.01)
        assert not task.done()
        stop.set()
        await task

    asyncio.run(go())
    assert started == [0, 1]
    assert any("in-process worker stopped" in r.getMessage() for r in caplog.records)
