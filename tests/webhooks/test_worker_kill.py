"""A ``plait worker`` process SIGKILLed between the event's commit and the end of its
delivery (the receiver has the request but has not answered), then another worker: the
delivery arrives again with the same ``webhook-id`` (a duplicate on the wire, one event
after deduplication by id) and is recorded as delivered after two attempts."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from plait.adapters.stores.postgres.store import PostgresStore
from plait.adapters.stores.sqlite.store import SqliteStore
from plait.adapters.system import RandomIds, SystemClock
from plait.application.webhooks import WebhookService
from plait.domain.webhooks import Delivery, DeliveryStatus
from plait.runtime import Runtime
from tests.pg import empty_database
from tests.webhooks.receiver import Receiver


@pytest.fixture(params=["sqlite", "postgres"])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'plait.db'}"
    url: str = request.getfixturevalue("pg_url")
    empty_database(url)
    return url


def _prepare(url: str, receiver_url: str) -> tuple[str, str]:
    async def go() -> tuple[str, str]:
        rt = Runtime.open(db=url, tools=())
        try:
            assert isinstance(rt.store, SqliteStore | PostgresStore)
            hooks = WebhookService(store=rt.store, clock=SystemClock(), ids=RandomIds())
            endpoint = await hooks.add(receiver_url, ["run.finished"], principal=None)
            session = await rt.service.create_session(owner="ana")
            run = await rt.service.submit(session.id, "hello")
            return endpoint.secret, run.id
        finally:
            await rt.close()

    return asyncio.run(go())


def _deliveries(url: str) -> list[Delivery]:
    async def go() -> list[Delivery]:
        rt = Runtime.open(db=url, store_only=True)
        try:
            assert isinstance(rt.store, SqliteStore | PostgresStore)
            return await rt.store.list_deliveries()
        finally:
            await rt.close()

    return asyncio.run(go())


def _worker(
    tmp_path: Path, url: str, script: Path, poll: str = "0.1", *, short_lease: bool = False
) -> subprocess.Popen[str]:
    """A worker. With ``short_lease`` its deliveries are leased for 3 s, so that after it
    is killed the next worker sends them again soon; otherwise the lease and the POST's
    timeout are long enough that a host slowed by the rest of the suite does not time out
    an answered request (which rightly sends it again: at least once)."""
    lease, timeout = ("3", "2") if short_lease else ("60", "30")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PLAIT_")}
    env.update(
        PLAIT_DB=url, PLAIT_MODEL=f"scripted:{script}", PLAIT_GRACE_SECONDS="5",
        PLAIT_WEBHOOK_LEASE_SECONDS=lease, PLAIT_WEBHOOK_TIMEOUT_SECONDS=timeout,
        PLAIT_WEBHOOK_POLL_SECONDS=poll,
    )  # fmt: skip
    return subprocess.Popen(
        [sys.executable, "-m", "plait", "worker", "--json"],
        env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def _run_status(url: str, run_id: str) -> str:
    async def go() -> str:
        rt = Runtime.open(db=url, store_only=True)
        try:
            return (await rt.store.get_run(run_id)).status.value
        finally:
            await rt.close()

    return asyncio.run(go())


def _stop(proc: subprocess.Popen[str], sig: int) -> tuple[str, str]:
    if proc.poll() is None:
        proc.send_signal(sig)
    return proc.communicate(timeout=30)


@pytest.mark.slow
def test_a_worker_killed_mid_delivery_causes_a_retry_never_a_loss(tmp_path: Path, db: str) -> None:
    url = db
    script = tmp_path / "m.json"
    script.write_text(json.dumps({"version": 1, "assistant": [{"text": "hi there"}]}))
    receiver = Receiver()
    release = threading.Event()
    receiver.hold = release  # the first request is received, never answered
    procs: list[subprocess.Popen[str]] = []
    try:
        receiver.secret, run_id = _prepare(url, receiver.url)
        first = _worker(tmp_path, url, script, short_lease=True)
        procs.append(first)
        assert receiver.arrived.wait(60), _stop(first, signal.SIGKILL)
        first.kill()  # SIGKILL while the delivery is in flight
        first.communicate(timeout=30)
        assert first.returncode == -signal.SIGKILL
        [delivery] = _deliveries(url)
        assert delivery.status is DeliveryStatus.PENDING and delivery.attempts == 1
        receiver.hold = None
        release.set()
        second = _worker(tmp_path, url, script)
        procs.append(second)
        deadline = time.monotonic() + 60
        while _deliveries(url)[0].status is not DeliveryStatus.DELIVERED:
            assert second.poll() is None, second.communicate()
            assert time.monotonic() < deadline, "the delivery was not retried"
            time.sleep(0.1)
        _, err = _stop(second, signal.SIGTERM)
        assert second.returncode == 0, err
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
        release.set()
        receiver.stop()
    [msg_id] = receiver.events
    assert receiver.wire == [msg_id, msg_id]  # a duplicate on the wire, deduplicated by id
    payload: dict[str, Any] = receiver.events[msg_id]
    assert payload["type"] == "run.finished" and payload["data"]["run_id"] == run_id
    [delivery] = _deliveries(url)
    assert delivery.event_id == msg_id and delivery.attempts == 2
    assert not receiver.rejected


@pytest.mark.slow
def test_a_worker_killed_after_the_commit_before_sending_loses_nothing(
    tmp_path: Path, db: str
) -> None:
    """The first worker finishes the run (the event and its delivery are committed) but
    its delivery loop, which polled before the run was even submitted, sleeps for an
    hour: SIGKILL it there. The next worker sends the delivery, once."""
    url = db
    script = tmp_path / "m.json"
    script.write_text(json.dumps({"version": 1, "assistant": [{"text": "hi there"}]}))
    receiver = Receiver()
    procs: list[subprocess.Popen[str]] = []
    try:
        first = _worker(tmp_path, url, script, poll="3600")
        procs.append(first)
        assert first.stderr is not None
        for line in first.stderr:  # its one poll is under way before the run exists
            if "webhook deliveries: polling every" in line:
                break
        receiver.secret, run_id = _prepare(url, receiver.url)
        deadline = time.monotonic() + 60
        while _run_status(url, run_id) != "completed":
            assert first.poll() is None, first.communicate()
            assert time.monotonic() < deadline, "the worker did not finish the run"
            time.sleep(0.05)
        first.kill()
        first.communicate(timeout=30)
        [delivery] = _deliveries(url)
        assert delivery.status is DeliveryStatus.PENDING and delivery.attempts == 0
        assert receiver.wire == []
        second = _worker(tmp_path, url, script)
        procs.append(second)
        while _deliveries(url)[0].status is not DeliveryStatus.DELIVERED:
            assert second.poll() is None, second.communicate()
            assert time.monotonic() < deadline + 60, "the delivery was not sent"
            time.sleep(0.1)
        _, err = _stop(second, signal.SIGTERM)
        assert second.returncode == 0, err
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
        receiver.stop()
    [msg_id] = receiver.events
    assert receiver.wire == [msg_id]
    assert receiver.events[msg_id]["data"]["run_id"] == run_id
