"""What a branch inherits from its source's compaction records (docs/design.md#forks, #compaction).

- A summary is inherited only if it covers nothing after the fork point and its source
  digest matches the branch's prefix (the same message ids, in order, through the seq it
  covers). The newest such summary is taken; if none qualifies the branch starts without
  one. A summary covering past the fork point would carry conclusions from messages the
  branch does not have, so it is never inherited, not even cut down.
- Constraint records are inherited when their source message is in the branch's prefix.

The chosen records are installed on the branch right after the fork commits (the summary
as the branch's generation 1). If the process dies between the two writes, the branch
simply has no summary, which is the valid fallback above; the raw prefix is complete.
"""

from __future__ import annotations

import contextlib
import hashlib
from dataclasses import replace
from typing import Protocol

from plait.application.ports import ForkStore, SessionStore, SummaryStore
from plait.domain.errors import ConflictError
from plait.domain.record import record
from plait.domain.summary import Constraint, Summary, source_digest

__all__ = ["Inheritance", "SummaryInheritance"]


class _Store(SessionStore, ForkStore, SummaryStore, Protocol):
    pass


@record
class Inheritance:
    summary: Summary | None
    constraints: tuple[Constraint, ...]


class SummaryInheritance:
    """Chooses (before the fork commits) and installs (after) what a branch inherits."""

    def __init__(self, store: _Store) -> None:
        self.store = store

    async def choose(self, source_id: str, through_seq: int) -> Inheritance:
        chosen: Summary | None = None
        for summary in reversed(await self.store.list_summaries(source_id)):
            if summary.covered_through_seq > through_seq:
                continue  # it knows about messages after the fork point
            prefix = await self.store.read_messages(source_id, limit=summary.covered_through_seq)
            ids = [sm.message.id for sm in prefix]
            if (
                len(ids) == summary.covered_through_seq
                and ids[-1] == summary.covered_through_message_id
                and source_digest(ids) == summary.source_digest
            ):
                chosen = summary
                break
        kept = []
        for constraint in await self.store.list_constraints(source_id):
            seq = await self.store.message_seq(source_id, constraint.source_message_id)
            if seq is not None and seq <= through_seq:
                kept.append(constraint)
        return Inheritance(chosen, tuple(kept))

    async def install(self, branch_id: str, inherited: Inheritance) -> None:
        if inherited.constraints:
            await self.store.add_constraints(branch_id, inherited.constraints)
        summary = inherited.summary
        if summary is None or await self.store.get_summary(branch_id) is not None:
            return
        key = hashlib.sha256(f"{summary.id}\0{branch_id}".encode()).hexdigest()[:24]
        copy = replace(summary, id=f"sum_{key}", session_id=branch_id, generation=1)
        with contextlib.suppress(ConflictError):  # a concurrent retry installed it first
            await self.store.activate_summary(copy, expected_generation=0)
