"""SIGKILL during an MCP call, then recovery in another runtime: a side-effecting call is
``unknown`` (a person must say what happened); a read-only one is executed again."""

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

from plait.domain.messages import ToolStatus
from plait.domain.runs import Run, RunStatus
from plait.domain.session import ExecutionRecord
from tests.mcp.agent_proc import open_runtime

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("bwrap")]
REPO = Path(__file__).resolve().parents[2]


def events(ws: Path) -> list[str]:
    log = ws / "mcp-calls.log"
    lines = log.read_text().splitlines() if log.exists() else []
    return [json.loads(line)["event"] for line in lines]


def kill_during(tmp_path: Path, tool: str) -> tuple[str, Path]:
    ws = tmp_path / "ws"
    ws.mkdir()
    db = f"sqlite:///{tmp_path / 'plait.db'}"
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.mcp.agent_proc", db, str(ws), tool],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 60
        while f"{tool}_started" not in events(ws):
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            assert time.monotonic() < deadline, "the call never reached the server"
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
        if proc.stderr is not None:
            proc.stderr.close()
    return db, ws


Recovered = tuple[Run, list[ExecutionRecord]]


def recover(
    db: str, ws: Path, tool: str, monkeypatch: pytest.MonkeyPatch
) -> tuple[Run, list[ExecutionRecord]]:
    monkeypatch.chdir(ws)
    rt = open_runtime(db, tool)

    async def go() -> Recovered:
        try:
            deadline = time.monotonic() + 30
            while not (reports := await rt.service.recover()):
                assert time.monotonic() < deadline, "the lease never expired"
                await asyncio.sleep(0.2)
            (report,) = reports
            assert report.result is not None, report
            return report.result.run, await rt.store.get_executions(report.result.run.id)
        finally:
            await rt.close()

    return asyncio.run(go())


def test_a_side_effect_killed_mid_call_is_unknown_after_recovery(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db, ws = kill_during(tmp_path, "slow_write")
    run, records = recover(db, ws, "slow_write", monkeypatch)
    assert run.status is RunStatus.AWAITING_RESOLUTION
    (record,) = records
    assert record.result_status is ToolStatus.UNKNOWN
    assert events(ws) == ["slow_write_started"]  # never repeated


def test_a_read_killed_mid_call_is_repeated_after_recovery(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db, ws = kill_during(tmp_path, "slow_read")
    run, records = recover(db, ws, "slow_read", monkeypatch)
    assert run.status is RunStatus.COMPLETED
    (record,) = records
    assert record.result_status is ToolStatus.SUCCEEDED
    assert events(ws) == ["slow_read_started", "slow_read_started"]
