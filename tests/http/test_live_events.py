"""Live run events across processes: an API process on PostgreSQL (no worker of its own)
streams the events a separate worker process writes, woken by ``LISTEN/NOTIFY``.

"Promptly" is checked causally, not by timing: the worker's tool waits until the test,
reading the stream, has seen the run reach the tool, and every read of the stream may
wait at most 5 s while the stream itself would poll only every 60 s (keep-alives every
15 s). So the test passes only if notifications wake the stream.
"""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from plait.adapters.stores.postgres.feed import PgEventFeed
from plait.adapters.stores.postgres.store import PostgresStore
from plait.adapters.system import RandomIds, SystemClock
from plait.domain.service import Role
from plait.entrypoints.http.app import create_app
from plait.entrypoints.http.auth import create_key
from plait.entrypoints.http.server import Settings, context_for
from plait.runtime import Runtime
from tests.http.conftest import start_server
from tests.http.sse import read_events
from tests.pg import empty_database
from tests.stores.worker import child_env


@dataclass
class PgLive:
    url: str
    key: str
    gates: Path
    feed: Any
    pg_url: str

    def client(self) -> httpx.Client:
        headers = {"Authorization": f"Bearer {self.key}"}
        timeout = httpx.Timeout(10.0, read=5.0)
        return httpx.Client(base_url=self.url, headers=headers, timeout=timeout)


def _key(url: str) -> str:
    async def go() -> str:
        store = PostgresStore(url)
        try:
            _, secret = await create_key(
                store, principal="ana", role=Role.USER, clock=SystemClock(), ids=RandomIds()
            )
            return secret
        finally:
            await store.close()

    return asyncio.run(go())


def _wait_for(condition: Any, what: str, proc: subprocess.Popen[str] | None = None) -> None:
    deadline = time.monotonic() + 60
    while not condition():
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"the worker exited: {proc.communicate()[1][-3000:]}")
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


@pytest.fixture
def pg_live(pg_url: str, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[PgLive]:
    empty_database(pg_url)
    key = _key(pg_url)
    poll, retry = getattr(request, "param", (60.0, 1.0))
    store = PostgresStore(pg_url)
    rt = Runtime(
        store=store, artifacts=store, model=None, tools=[], clock=SystemClock(), ids=RandomIds()
    )
    ctx = context_for(rt, Settings(db=pg_url, serve_workers=0))
    ctx.feed = PgEventFeed(pg_url, poll_seconds=poll, retry_seconds=retry)
    server, thread, url = start_server(create_app(ctx))
    gates = tmp_path / "gates"
    gates.mkdir()
    worker = subprocess.Popen(
        [sys.executable, "-m", "tests.http.pg_worker", pg_url, str(gates)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=child_env(),
    )  # fmt: skip
    try:
        _wait_for((gates / "worker-ready").exists, "the worker", worker)
        yield PgLive(url=url, key=key, gates=gates, feed=ctx.feed, pg_url=pg_url)
    finally:
        worker.terminate()
        worker.communicate(timeout=60)
        server.should_exit = True
        thread.join(timeout=20)


def _follow_until_tool(live: PgLive, c: httpx.Client, run_id: str, sid: str) -> list[Any]:
    """Read the stream until the run is in its tool, then let the tool finish."""
    with c.stream("GET", f"/v1/runs/{run_id}/events") as r:
        assert r.status_code == 200
        seen: list[str] = []
        for line in r.iter_lines():
            if line.startswith("event: "):
                seen.append(line[7:])
            if seen and seen[-1] == "tool_started":
                break
    (live.gates / sid).touch()
    return seen


def _start_run(c: httpx.Client) -> tuple[str, str]:
    sid = c.post("/v1/sessions", json={}).json()["session_id"]
    run = c.post(f"/v1/sessions/{sid}/messages", json={"text": "go"})
    assert run.status_code == 202, run.text
    return sid, run.json()["run_id"]


@pytest.mark.slow
def test_a_stream_sees_another_process_s_events_as_they_are_written(pg_live: PgLive) -> None:
    with pg_live.client() as c:
        sid, run_id = _start_run(c)
        seen = _follow_until_tool(pg_live, c, run_id, sid)
        assert seen[:2] == ["run_started", "step_started"]
        # Resume after what was read: the rest arrives live, through run_finished.
        rest = read_events(c, run_id, last_event_id=str(len(seen)))
        assert rest[-1].event == "run_finished"
        assert rest[-1].data["run"]["status"] == "completed"
        everything = read_events(c, run_id)
        assert [f.event for f in everything] == seen + [f.event for f in rest]
        assert [int(f.id or 0) for f in everything] == list(range(1, len(everything) + 1))
    assert pg_live.feed.live


@pytest.mark.slow
@pytest.mark.parametrize("pg_live", [(0.2, 3.0)], indirect=True)
def test_streams_fall_back_to_polling_while_the_listener_is_down(pg_live: PgLive) -> None:
    with pg_live.client() as c:
        _wait_for(pg_live.feed.connected.is_set, "the listener")
        with psycopg.connect(pg_live.pg_url, autocommit=True) as conn:
            killed = conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE query LIKE 'LISTEN %'"
            ).fetchall()
        assert killed == [(True,)]
        _wait_for(lambda: not pg_live.feed.live, "the feed to notice")
        sid, run_id = _start_run(c)
        seen = _follow_until_tool(pg_live, c, run_id, sid)
        rest = read_events(c, run_id, last_event_id=str(len(seen)))
        assert rest[-1].event == "run_finished"
        # The listener comes back by itself.
        _wait_for(lambda: pg_live.feed.live, "the listener to reconnect")
        sid2, run2 = _start_run(c)
        (pg_live.gates / sid2).touch()
        assert read_events(c, run2)[-1].data["run"]["status"] == "completed"


def test_without_a_reachable_server_streams_poll() -> None:
    async def go() -> None:
        with socket.socket() as s:  # a loopback port nobody listens on
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        feed = PgEventFeed(f"postgresql://plait@127.0.0.1:{port}/none", poll_seconds=0.01)
        try:
            for _ in range(3):  # each wait ends after the poll interval, not the hour
                assert await asyncio.wait_for(feed.wait("r1", after=0, at_most=3600), 30) is False
            assert not feed.live
            feed.notify("r1", 2)  # this process's own writes still wake its streams
            assert await feed.wait("r1", after=1, at_most=3600) is True
        finally:
            await feed.close()

    asyncio.run(go())
