"""A run that starts on (or resumes) a session reads the session and its history in one
store call where the store offers it (HistoryRead), and in two where it does not: the
model sees the same history either way."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from plait.adapters.stores.memory.store import MemoryStore
from plait.domain.messages import Message
from plait.domain.runs import RunStatus
from plait.domain.session import Session, StoredMessage
from tests.application.conftest import make_rig, reply, run


class CountingStore(MemoryStore):
    """Counts the reads a run start makes."""

    def __init__(self) -> None:
        super().__init__()
        self.reads: list[str] = []

    async def get_session(self, session_id: str) -> Session:
        self.reads.append("get_session")
        return await super().get_session(session_id)

    async def read_messages(
        self, session_id: str, *, after: int = 0, limit: int | None = None
    ) -> list[StoredMessage]:
        self.reads.append("read_messages")
        return await super().read_messages(session_id, after=after, limit=limit)

    async def read_history(self, session_id: str) -> tuple[Session, list[Message]]:
        self.reads.append("read_history")
        return await super().read_history(session_id)


class TwoReadStore(CountingStore):
    """The same store declaring no HistoryRead: the run falls back to two reads."""

    capabilities = replace(MemoryStore.capabilities, history_read=False)

    async def read_history(self, session_id: str) -> tuple[Session, list[Message]]:
        raise AssertionError("read_history used though the store does not declare it")


def _second_send(store: CountingStore) -> tuple[list[str], list[Any]]:
    rig = make_rig([reply("one"), reply("two")], store=store)
    session = run(rig.service.create_session())
    first = run(rig.service.send(session.id, "first"))
    assert first.run.status is RunStatus.COMPLETED
    store.reads.clear()
    second = run(rig.service.send(session.id, "second"))
    assert second.run.status is RunStatus.COMPLETED
    seen = [(m.kind, getattr(m, "text", None)) for m in rig.turns.requests[-1].context.items]
    return store.reads, seen


@pytest.mark.parametrize(
    ("store_class", "reads"),
    [
        (CountingStore, ["read_history"]),
        (TwoReadStore, ["get_session", "read_messages"]),
    ],
)
def test_a_run_start_reads_the_session_and_history_once(
    store_class: type[CountingStore], reads: list[str]
) -> None:
    made, seen = _second_send(store_class())
    assert made == reads
    assert seen == [
        ("user", "first"),
        ("assistant", "one"),
        ("user", "second"),
    ]
