"""Hooks and helpers shared by the store contract suites."""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from plait.adapters.stores import Store
from plait.application.ports import Commit, CommitResult
from plait.domain.messages import Message
from plait.domain.session import StoredMessage
from tests.contract.builders import (
    lease,
    new_run,
    new_session,
)

Scenario = Callable[[Store], Awaitable[None]]
Scenario2 = Callable[[Store, Store], Awaitable[None]]


async def started(store: Store, *messages: Message, owner: str | None = None) -> CommitResult:
    """Session s1 with run r1 started (and leased to ``owner`` when given)."""
    await store.create_session(new_session())
    run = new_run(lease=None if owner is None else lease(owner))
    return await store.start_run(
        Commit(session_id="s1", expected_version=0, run=run, messages=messages)
    )


def stored(*messages: Message, first: int = 1) -> list[StoredMessage]:
    return [StoredMessage(first + i, m) for i, m in enumerate(messages)]


class ContractBase(ABC):
    tmp_path: Path

    @pytest.fixture(autouse=True)
    def _tmp(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path

    @abstractmethod
    def create_store(self) -> Store:
        """A fresh, empty store (may use ``self.tmp_path``)."""

    def second_handle(self) -> Store | None:
        """Another handle on the store last created (asked for when the store declares
        ``capabilities.second_handle``)."""
        return None

    def run(self, scenario: Scenario) -> None:
        async def main() -> None:
            store = self.create_store()
            try:
                await scenario(store)
            finally:
                await store.close()

        asyncio.run(main())

    def run2(self, scenario: Scenario2) -> None:
        async def main() -> None:
            first = self.create_store()
            if not first.capabilities.second_handle:
                await first.close()
                pytest.skip("this store has no second handle")
            second = self.second_handle()
            assert second is not None, "the store declares a second handle: open it"
            try:
                await scenario(first, second)
            finally:
                await second.close()
                await first.close()

        asyncio.run(main())
