"""Commit pipelining, which every store offers (:class:`~plait.application.ports.
QueuedCommits`): a commit queued with ``commit_soon`` is applied after those queued before
it, ``after`` runs once it is durable and before the next one, and a commit queued behind
one that failed cannot land without it (issue 22 item 5)."""

from __future__ import annotations

import asyncio
from typing import cast

import pytest

from plait.adapters.stores import Store
from plait.application.ports import Commit, QueuedCommits
from plait.domain.errors import ConflictError
from tests.contract.base import ContractBase, started, stored
from tests.contract.builders import user


def _queue(store: Store) -> QueuedCommits:
    return cast(QueuedCommits, store)


class PipelineContract(ContractBase):
    def test_commits_queued_back_to_back_apply_in_order(self) -> None:
        async def scenario(store: Store) -> None:
            await started(store)
            order: list[str] = []
            first = _queue(store).commit_soon(
                Commit(session_id="s1", expected_version=0, messages=(user("m1", "one"),)),
                after=lambda: order.append("first durable"),
            )
            second = _queue(store).commit_soon(
                Commit(session_id="s1", expected_version=1, messages=(user("m2", "two"),)),
                after=lambda: order.append("second durable"),
            )
            results = await asyncio.gather(first, second)
            assert [result.version for result in results] == [1, 2]
            assert order == ["first durable", "second durable"]
            assert await store.read_messages("s1") == stored(user("m1", "one"), user("m2", "two"))

        self.run(scenario)

    def test_a_commit_queued_behind_a_failed_one_cannot_land(self) -> None:
        async def scenario(store: Store) -> None:
            await started(store)
            ran: list[str] = []
            stale = _queue(store).commit_soon(
                Commit(session_id="s1", expected_version=5, messages=(user("m1"),)),
                after=lambda: ran.append("stale"),
            )
            behind = _queue(store).commit_soon(
                Commit(session_id="s1", expected_version=1, messages=(user("m2"),))
            )
            with pytest.raises(ConflictError):
                await stale
            with pytest.raises(ConflictError):
                await behind
            assert ran == []  # ``after`` runs only once a commit is durable
            assert await store.read_messages("s1") == []

        self.run(scenario)
