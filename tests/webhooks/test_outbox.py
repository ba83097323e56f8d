"""Webhooks over the SQLite and the PostgreSQL store: each event kind written in its state change's
transaction and delivered signed (verified with the Standard Webhooks reference
library), a principal's endpoint gets its own sessions' events only, a receiver that is
down gets everything once it is back, a failing endpoint is paused, bad input is refused."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest

from plait.adapters.stores import open_store
from plait.adapters.stores.memory.store import MemoryStore
from plait.adapters.stores.postgres.store import PostgresStore
from plait.adapters.stores.sqlite.store import SqliteStore
from plait.adapters.system import RandomIds, SystemClock
from plait.adapters.webhook_sender import HttpxSender
from plait.application.ports import Commit, ModelRequest, ModelResponse
from plait.application.service import AgentService
from plait.application.webhooks import WebhookDispatcher, WebhookService
from plait.domain.errors import ValidationError, WebhookNotFoundError
from plait.domain.governance import Approval
from plait.domain.runs import RunStatus
from plait.domain.service import EventType, NewRunEvent
from plait.domain.webhooks import EVENT_TYPES, DeliveryStatus, EndpointStatus
from plait.testing import FunctionModel
from tests.pg import empty_database
from tests.webhooks.receiver import Receiver

T = TypeVar("T")


def answer(request: ModelRequest) -> ModelResponse:
    return ModelResponse(text="done")


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "memory":
        return "memory://"
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'plait.db'}"
    url: str = request.getfixturevalue("pg_url")
    empty_database(url)
    return url


class World:
    def __init__(self, url: str) -> None:
        store = open_store(url)
        assert isinstance(store, MemoryStore | SqliteStore | PostgresStore)
        self.store = store
        self.clock = SystemClock()
        self.service = AgentService.build(
            store=store, artifacts=store, model=FunctionModel(answer, name="m"),
            clock=self.clock, ids=RandomIds(),
        )  # fmt: skip
        self.hooks = WebhookService(store=store, clock=self.clock, ids=RandomIds())
        # The receivers listen on loopback: a principal's endpoint may reach it only so.
        self.sender = HttpxSender(timeout=5.0, private_networks=True)

    def dispatcher(self, **kw: Any) -> WebhookDispatcher:
        options: dict[str, Any] = {"schedule": (0.0,) * 8, "jitter": lambda: 0.0, **kw}
        return WebhookDispatcher(
            store=self.store, sender=self.sender, clock=self.clock, owner="test", **options
        )

    async def finished_run(self, owner: str | None = None) -> str:
        session = await self.service.create_session(owner=owner)
        result = await self.service.send(session.id, "hello")
        assert result.run.status is RunStatus.COMPLETED
        return result.run.id

    async def close(self) -> None:
        await self.sender.close()
        await self.store.close()


def run(url: str, body: Callable[[World], Awaitable[T]]) -> T:
    async def go() -> T:
        world = World(url)
        try:
            return await body(world)
        finally:
            await world.close()

    return asyncio.run(go())


async def drain(dispatcher: WebhookDispatcher) -> None:
    while await dispatcher.run_once():
        pass


@pytest.mark.slow
def test_every_event_kind_is_delivered_signed_once(db: str) -> None:
    receiver = Receiver()

    async def body(w: World) -> None:
        endpoint = await w.hooks.add(receiver.url, list(EVENT_TYPES), principal=None)
        receiver.secret = endpoint.secret
        run_id = await w.finished_run(owner="ana")
        # approval needed
        session = await w.service.create_session(owner="ana")
        queued = await w.service.submit(session.id, "wait")
        await w.store.request_approval(Approval(
            id="apr_1", session_id=session.id, run_id=queued.id, call_id="c1",
            tool_name="write_file", args_digest="d", scope=("notes.txt",),
            workspace_state=None, requested_at=w.clock.now(), reason="writes a file",
        ))  # fmt: skip
        # an unknown outcome puts the run in awaiting_resolution
        version = (await w.store.get_session(session.id)).version
        waiting = dataclasses.replace(queued, status=RunStatus.AWAITING_RESOLUTION)
        await w.store.commit(Commit(session_id=session.id, expected_version=version, run=waiting))
        # a failed compaction (a persisted run event)
        failed = NewRunEvent(
            type=EventType.COMPACTION, at=w.clock.now(),
            data={"phase": "failed", "trigger": "pressure", "reason": "summarizer refused"},
        )  # fmt: skip
        skipped = dataclasses.replace(failed, data={"phase": "skipped"})
        await w.store.append_run_events(queued.id, [failed, skipped])
        await drain(w.dispatcher())
        by_type = {p["type"]: p for p in receiver.events.values()}
        assert sorted(by_type) == sorted(EVENT_TYPES)
        assert len(receiver.wire) == 4 and not receiver.rejected
        done = by_type["run.finished"]["data"]
        assert done["run_id"] == run_id and done["status"] == "completed"
        assert by_type["approval.needed"]["data"]["approval_id"] == "apr_1"
        assert by_type["approval.needed"]["data"]["tool_name"] == "write_file"
        assert by_type["outcome.unknown"]["data"]["run_id"] == queued.id
        assert by_type["compaction.failed"]["data"]["reason"] == "summarizer refused"
        for msg_id, payload in receiver.events.items():
            assert payload["data"]["event_id"] == msg_id
            assert payload["timestamp"].endswith("Z")
        listed = await w.hooks.deliveries(principal=None)
        assert {d.status for d in listed} == {DeliveryStatus.DELIVERED}
        assert all(d.attempts == 1 for d in listed)

    try:
        run(db, body)
    finally:
        receiver.stop()


@pytest.mark.slow
def test_a_principal_endpoint_gets_only_its_own_sessions_events(db: str) -> None:
    mine, everyone = Receiver(), Receiver()

    async def body(w: World) -> None:
        ana = await w.hooks.add(mine.url, ["run.finished"], principal="ana")
        admin = await w.hooks.add(everyone.url, ["run.finished"], principal=None)
        mine.secret, everyone.secret = ana.secret, admin.secret
        ana_run = await w.finished_run(owner="ana")
        bob_run = await w.finished_run(owner="bob")
        await drain(w.dispatcher())
        assert [p["data"]["run_id"] for p in mine.events.values()] == [ana_run]
        assert {p["data"]["run_id"] for p in everyone.events.values()} == {ana_run, bob_run}
        assert [e.id for e in await w.hooks.endpoints(principal="bob")] == []
        with pytest.raises(WebhookNotFoundError):
            await w.hooks.deliveries(principal="bob", endpoint_id=ana.id)
        with pytest.raises(WebhookNotFoundError):
            await w.hooks.remove(ana.id, principal="bob")

    try:
        run(db, body)
    finally:
        mine.stop()
        everyone.stop()


@pytest.mark.slow
def test_a_receiver_down_for_a_while_gets_every_delivery_when_it_returns(db: str) -> None:
    receiver = Receiver()

    async def body(w: World) -> None:
        endpoint = await w.hooks.add(receiver.url, ["run.finished"], principal=None)
        receiver.secret = endpoint.secret
        receiver.stop()  # connection refused from now on
        runs = [await w.finished_run() for _ in range(3)]
        dispatcher = w.dispatcher()
        for _ in range(3):
            assert await dispatcher.run_once() == 3
        pending = await w.hooks.deliveries(principal=None, status=DeliveryStatus.PENDING)
        assert len(pending) == 3 and all(d.attempts == 3 for d in pending)
        assert all("ConnectError" in (d.last_error or "") for d in pending)
        receiver.start()  # back, on the same port
        await drain(dispatcher)
        assert {p["data"]["run_id"] for p in receiver.events.values()} == set(runs)
        assert len(receiver.wire) == 3
        delivered = await w.hooks.deliveries(principal=None, status=DeliveryStatus.DELIVERED)
        assert len(delivered) == 3 and all(d.attempts == 4 for d in delivered)

    try:
        run(db, body)
    finally:
        receiver.stop()


@pytest.mark.slow
def test_an_endpoint_that_keeps_failing_is_paused_until_resumed(db: str) -> None:
    receiver = Receiver()
    receiver.status = 503

    async def body(w: World) -> None:
        endpoint = await w.hooks.add(receiver.url, ["run.finished"], principal=None)
        receiver.secret = endpoint.secret
        await w.finished_run()
        dispatcher = w.dispatcher(pause_after=3)
        await drain(dispatcher)  # three failures, then nothing is claimed any more
        paused = await w.hooks.get(endpoint.id, principal=None)
        assert paused.status is EndpointStatus.PAUSED
        assert paused.paused_reason == "paused after 3 consecutive failed attempts (last: HTTP 503)"
        assert len(receiver.wire) == 3
        [delivery] = await w.hooks.deliveries(principal=None)
        assert delivery.status is DeliveryStatus.PENDING and delivery.last_status_code == 503
        receiver.status = 200
        resumed = await w.hooks.resume(endpoint.id, principal=None)
        assert resumed.status is EndpointStatus.ACTIVE and resumed.failures == 0
        await drain(dispatcher)
        [delivery] = await w.hooks.deliveries(principal=None)
        assert delivery.status is DeliveryStatus.DELIVERED and delivery.attempts == 4
        assert len(set(receiver.wire)) == 1

    try:
        run(db, body)
    finally:
        receiver.stop()


@pytest.mark.slow
def test_a_delivery_out_of_retries_is_failed_and_resume_requeues_it(db: str) -> None:
    receiver = Receiver()
    receiver.status = 500

    async def body(w: World) -> None:
        endpoint = await w.hooks.add(receiver.url, ["run.finished"], principal=None)
        receiver.secret = endpoint.secret
        await w.finished_run()
        await drain(w.dispatcher(schedule=(0.0,)))
        [delivery] = await w.hooks.deliveries(principal=None)
        assert delivery.status is DeliveryStatus.FAILED and delivery.attempts == 2
        receiver.status = 204
        await w.hooks.resume(endpoint.id, principal=None)
        await drain(w.dispatcher())
        [delivery] = await w.hooks.deliveries(principal=None)
        assert delivery.status is DeliveryStatus.DELIVERED

    try:
        run(db, body)
    finally:
        receiver.stop()


def test_bad_input_is_refused_with_a_clear_error(db: str) -> None:
    async def body(w: World) -> None:
        with pytest.raises(ValidationError, match="http:// or https://"):
            await w.hooks.add("ftp://example.test/x", ["run.finished"], principal=None)
        with pytest.raises(ValidationError, match=r"unknown webhook events \['run.done'\]"):
            await w.hooks.add("http://127.0.0.1:1/x", ["run.done"], principal=None)
        with pytest.raises(ValidationError, match="at least one event"):
            await w.hooks.add("http://127.0.0.1:1/x", [" "], principal=None)
        with pytest.raises(WebhookNotFoundError):
            await w.hooks.resume("wh_nope", principal=None)
        assert await w.hooks.endpoints(principal=None) == []

    run(db, body)


@pytest.mark.slow
def test_no_endpoint_no_events(db: str) -> None:
    """Without endpoints nothing is queued: deliveries go to endpoints that existed when
    the event was committed."""
    receiver = Receiver()

    async def body(w: World) -> None:
        await w.finished_run()
        endpoint = await w.hooks.add(receiver.url, ["run.finished"], principal=None)
        receiver.secret = endpoint.secret
        await drain(w.dispatcher())
        assert receiver.wire == []
        await w.finished_run()
        await drain(w.dispatcher())
        assert len(receiver.wire) == 1

    try:
        run(db, body)
    finally:
        receiver.stop()
