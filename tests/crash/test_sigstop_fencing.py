"""The SIGSTOP attack on real processes (issue 20 item 1): worker A is stopped with
SIGSTOP inside a side effect, past its lease; worker B takes the run over (the call
becomes ``unknown``, the run waits for a person); A gets SIGCONT. A must write nothing:
the run still waits, A says so in one warning (no traceback) and keeps serving; the
person's resolution queues the run and it completes, the effect having run once."""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from plait.adapters.stores.postgres.store import PostgresStore
from plait.adapters.stores.sqlite.store import SqliteStore
from plait.adapters.system import RandomIds, SystemClock
from plait.application.ports import ModelRequest, ModelResponse
from plait.application.service import AgentService
from plait.domain.messages import ToolStatus
from plait.domain.runs import Run, RunStatus
from plait.testing import FunctionModel
from tests.crash.harness import child_env
from tests.pg import empty_database

pytestmark = pytest.mark.slow

LEASE = 1.0
TAKEN = "lease was taken over"


def _wait(check: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def _answer(request: ModelRequest) -> ModelResponse:
    return ModelResponse(text="unused")


def _call(url: str, op: Callable[[AgentService], Any]) -> Any:
    """Run ``op`` with a service of this (test) process over the store."""

    async def go() -> Any:
        store = (
            SqliteStore(url.removeprefix("sqlite:///"))
            if url.startswith("sqlite")
            else (PostgresStore(url))
        )
        try:
            service = AgentService.build(
                store=store, artifacts=store, model=FunctionModel(_answer, name="fenced"),
                clock=SystemClock(), ids=RandomIds(), owner="person",
            )  # fmt: skip
            return await op(service)
        finally:
            await store.close()

    return asyncio.run(go())


def _worker(url: str, where: Path, name: str) -> tuple[subprocess.Popen[str], Path]:
    log = where / f"{name}.log"
    with log.open("w") as err:  # the child keeps its own descriptor
        proc = subprocess.Popen(
            [sys.executable, "-m", "tests.crash.fence_worker", url, str(where), str(LEASE)],
            stdout=subprocess.DEVNULL, stderr=err, text=True, env=child_env(),
        )  # fmt: skip
    return proc, log


def _stop(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGCONT)
        proc.terminate()
        proc.wait(timeout=60)


def _pause_outside_a_write(proc: subprocess.Popen[str], sqlite_file: Path | None) -> None:
    """SIGSTOP ``proc``, but not while it holds SQLite's write lock (its heartbeat or an
    event flush may be mid-commit): a process paused inside a write stalls every other
    writer of a SQLite file until it resumes, which is SQLite's single-writer rule, not
    the take-over this test is about. On PostgreSQL a paused worker holds no lock between
    statements."""
    while True:
        os.kill(proc.pid, signal.SIGSTOP)
        if sqlite_file is None:
            return
        probe = sqlite3.connect(sqlite_file, timeout=0.2)
        try:
            probe.execute("BEGIN IMMEDIATE")
            probe.execute("ROLLBACK")
            return
        except sqlite3.OperationalError:  # locked: let it finish that write, try again
            os.kill(proc.pid, signal.SIGCONT)
            time.sleep(0.05)
        finally:
            probe.close()


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_a_worker_stopped_past_its_lease_writes_nothing_after_the_take_over(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    if kind == "sqlite":
        url = f"sqlite:///{tmp_path / 'plait.db'}"
        asyncio.run(SqliteStore.open(tmp_path / "plait.db").close())
    else:
        url = request.getfixturevalue("pg_url")
        empty_database(url)

    async def submit(service: AgentService) -> Run:
        session = await service.create_session()
        return await service.submit(session.id, "deploy it")

    run: Run = _call(url, submit)
    a, a_log = _worker(url, tmp_path, "a")
    b: subprocess.Popen[str] | None = None
    try:
        _wait((tmp_path / "in-tool").exists, "worker A to enter the side effect")
        _pause_outside_a_write(a, tmp_path / "plait.db" if kind == "sqlite" else None)

        async def get(service: AgentService) -> Run:
            return await service.get_run(run.id)

        def expired() -> bool:
            lease = _call(url, get).lease
            return lease is not None and lease.expires_at < time.time()

        _wait(expired, "worker A's lease to expire")
        b, _ = _worker(url, tmp_path, "b")
        _wait(
            lambda: _call(url, get).status is RunStatus.AWAITING_RESOLUTION,
            "worker B to recover the run",
        )
        b.terminate()
        b.wait(timeout=60)
        (tmp_path / "go").touch()
        os.kill(a.pid, signal.SIGCONT)
        _wait(lambda: TAKEN in a_log.read_text(), "worker A's warning")

        async def state(service: AgentService) -> tuple[Run, Any, Any]:
            records = await service.store.get_executions(run.id)
            return await service.get_run(run.id), records, await service.history(run.session_id)

        now, records, history = _call(url, state)
        assert now.status is RunStatus.AWAITING_RESOLUTION
        assert [r.result_status for r in records] == [ToolStatus.UNKNOWN]
        assert [m.message.kind for m in history] == ["user", "assistant"]  # A wrote nothing

        async def resolve(service: AgentService) -> Run:
            return await service.resolve(run.id, "c1", "succeeded", "it is deployed", queue=True)

        assert _call(url, resolve).status is RunStatus.QUEUED
        _wait(lambda: _call(url, get).status is RunStatus.COMPLETED, "worker A to finish it")
        assert (tmp_path / "effects").read_text().splitlines() == [run.id]  # ran once
    finally:
        _stop(a)
        if b is not None:
            _stop(b)
    text = a_log.read_text()
    assert text.count(TAKEN) == 1 and run.id in text, text
    assert "Traceback" not in text, text
