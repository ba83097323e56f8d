"""The context of a step reads the active summary and the constraints in one store call
when the store offers it (PostgreSQL: one round trip), else one call each."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any

from plait.adapters.stores.memory.store import MemoryStore
from plait.adapters.tokens import EstimatingMeter
from plait.application.compaction._context import ContextAssembler
from plait.application.compaction._ledger import CountCache
from plait.application.compaction._profiles import ModelProfile
from plait.application.ports import Commit
from plait.domain.compaction import CompactionSettings
from plait.domain.messages import UserMessage
from plait.domain.session import Session
from plait.domain.summary import Constraint
from tests.compaction.test_loop import scripted, send, service


class Counting(MemoryStore):
    def __init__(self) -> None:
        super().__init__()
        self.calls: list[str] = []

    async def get_summary(self, session_id: str) -> Any:
        self.calls.append("get_summary")
        return await super().get_summary(session_id)

    async def list_constraints(self, session_id: str) -> Any:
        self.calls.append("list_constraints")
        return await super().list_constraints(session_id)


class Together(Counting):
    capabilities = replace(MemoryStore.capabilities, context_read=True)

    async def summary_and_constraints(self, session_id: str) -> Any:
        self.calls.append("both")
        return await MemoryStore.get_summary(self, session_id), await MemoryStore.list_constraints(
            self, session_id
        )


def build(store: Counting) -> str:
    async def go() -> str:
        await store.create_session(Session(id="s1", created_at=1.0))
        user = UserMessage(id="m1", text="hello", created_at=2.0)
        await store.commit(Commit(session_id="s1", expected_version=0, messages=(user,)))
        rule = Constraint(text="never push to main", source_message_id="m1")
        await store.add_constraints("s1", [rule])
        store.calls.clear()
        assembler = ContextAssembler(store=store, settings=CompactionSettings(), cache=CountCache())
        profile = ModelProfile(model="m", meter=EstimatingMeter("m"), context_window=100_000)
        view = await assembler.build(
            "s1", [user], profile=profile, instructions="be brief", tools=()
        )
        return repr(view.context.items)

    return asyncio.run(go())


def test_one_call_when_the_store_reads_both_together() -> None:
    store = Together()
    items = build(store)
    assert store.calls == ["both"]
    assert "never push to main" in items


def test_one_call_each_otherwise() -> None:
    store = Counting()
    items = build(store)
    assert sorted(store.calls) == ["get_summary", "list_constraints"]
    assert "never push to main" in items


def test_a_run_reads_them_once_per_step() -> None:
    """With automatic compaction on, a step's context, its post-step check and its
    post-answer check are built on one read of the summary and constraints (made when
    the step's context is built); nothing else reads them again."""
    calls = [{"tool_calls": [{"name": "echo", "arguments": {"text": f"{k}"}}]} for k in range(2)]
    model = scripted([*calls, {"text": "Done."}], [])

    async def go() -> list[str]:
        store = Together()
        agent, _ = service(model, store=store)
        _, result = await send(agent)
        assert result.run.status.value == "completed", result.run.error
        return store.calls

    assert asyncio.run(go()) == ["both"] * 3  # three steps
