"""Every store keeps a run's trace context (in the run's JSON: no schema change), through
a worker's claim too."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from plait.adapters.stores import open_store
from plait.application.claiming import ClaimedRun
from plait.application.service import AgentService
from plait.domain.runs import RunStatus
from plait.testing import FixedClock, ScriptedModel, SequentialIds
from tests.pg import empty_database
from tests.telemetry.conftest import make_otel


@pytest.fixture(params=["memory", "sqlite", "jsonl", "postgres"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    kind = request.param
    if kind == "postgres":
        url: str = request.getfixturevalue("pg_url")
        empty_database(url)
        return url
    return {
        "memory": "memory://",
        "sqlite": f"sqlite:///{tmp_path / 'plait.db'}",
        "jsonl": f"jsonl:///{tmp_path / 'store'}",
    }[kind]


def test_the_trace_context_is_stored_and_survives_a_claim(store_url: str) -> None:
    otel = make_otel()

    async def go() -> None:
        store: Any = open_store(store_url)
        try:
            model = ScriptedModel({"version": 1})
            service = AgentService.build(
                store=store,
                artifacts=store,
                model=model,
                clock=FixedClock(),
                ids=SequentialIds(),
                owner="api",
                telemetry=otel.telemetry,
            )
            session = await service.create_session()
            queued = await service.submit(session.id, "hello")
            assert queued.trace_context is not None and queued.trace_context.startswith("00-")
            assert (await store.get_run(queued.id)).trace_context == queued.trace_context
            if not store.capabilities.run_queue:
                return  # a store no worker serves
            queue: Any = store
            now = FixedClock().now()
            assert await queue.count_queued_runs(now=now) == 1
            if store.capabilities.starting_queue:
                claimed = await queue.claim_and_start_run(
                    owner="w", now=now, expires_at=now + 60, model="scripted", model_spec=None
                )
                assert isinstance(claimed, ClaimedRun)
                run = claimed.run
                assert await queue.count_queued_runs(now=now) == 0  # started in the claim
            else:
                run = await queue.claim_queued_run(owner="w", now=now, expires_at=now + 60)
                assert run is not None and run.status is RunStatus.QUEUED  # claimed, not started
                assert await queue.count_queued_runs(now=now) == 0  # a live lease: not queued
                assert await queue.count_queued_runs(now=now + 61) == 1  # its lease expired
            assert run is not None and run.trace_context == queued.trace_context
            assert (await store.get_run(queued.id)).trace_context == queued.trace_context
        finally:
            await store.close()

    asyncio.run(go())


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def queue_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "postgres":
        url: str = request.getfixturevalue("pg_url")
        empty_database(url)
        return url
    return {"memory": "memory://", "sqlite": f"sqlite:///{tmp_path / 'plait.db'}"}[request.param]


def test_the_queue_depth_leaves_out_runs_a_worker_claimed_but_has_not_started(
    queue_url: str,
) -> None:
    """``claim_queued_run`` leases a run that stays ``queued`` until its worker starts it
    (stores without a combined claim-and-start): the depth counts only free ones."""

    async def go() -> None:
        store: Any = open_store(queue_url)
        try:
            service = AgentService.build(
                store=store,
                artifacts=store,
                model=ScriptedModel({"version": 1}),
                clock=FixedClock(),
                ids=SequentialIds(),
                owner="api",
            )
            for _ in range(3):
                session = await service.create_session()
                await service.submit(session.id, "hello")
            now = FixedClock().now()
            assert await store.count_queued_runs(now=now) == 3
            claimed = await store.claim_queued_run(owner="w", now=now, expires_at=now + 60)
            assert claimed is not None and claimed.status is RunStatus.QUEUED
            assert (await store.get_run(claimed.id)).status is RunStatus.QUEUED
            assert await store.count_queued_runs(now=now) == 2  # leased: a worker has it
            assert await store.count_queued_runs(now=now + 60) == 3  # its lease expired
        finally:
            await store.close()

    asyncio.run(go())
