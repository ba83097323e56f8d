"""The read side: what surfaces (CLI, HTTP API) may look at, without writing anything.

:class:`Queries` is the only way a surface reads sessions, messages, runs, executions and
artifacts; the write side (sending, cancelling, recovering, resolving) is
:class:`~plait.application.service.AgentService`. Both are built by
:class:`plait.runtime.Runtime` over the same ports.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

from plait.application.ports import (
    ApprovalStore,
    ArtifactStore,
    Clock,
    ForkStore,
    SessionStore,
    SummaryStore,
)
from plait.application.retention import expiries_of
from plait.application.subagents import parent_calls, sub_agent_sessions
from plait.domain.forks import ForkRecord
from plait.domain.governance import Approval
from plait.domain.messages import ArtifactRef
from plait.domain.record import record
from plait.domain.retention import Expiry
from plait.domain.runs import Run, RunStatus
from plait.domain.session import ExecutionRecord, Session, StoredMessage
from plait.domain.subagents import ParentCall
from plait.domain.summary import Constraint, Summary

__all__ = ["LeaseInfo", "Queries", "RunDetail", "StoreInfo"]


@record
class RunDetail:
    """A run with the execution record of each of its tool calls."""

    run: Run
    executions: list[ExecutionRecord]


@record
class StoreInfo:
    """Where the store is (a URL, or a description for a store given as an object)."""

    location: str


@record
class LeaseInfo:
    """A running run whose lease has not expired: its owner may still be alive."""

    run: Run
    owner: str
    expires_at: float
    seconds_left: float


class Queries:
    """Read-only access to a store."""

    def __init__(
        self,
        *,
        store: SessionStore,
        artifacts: ArtifactStore,
        clock: Clock,
        location: str = "(a store object)",
    ) -> None:
        self._store = store
        self._artifacts = artifacts
        self._clock = clock
        self._location = location

    def store_info(self) -> StoreInfo:
        return StoreInfo(location=self._location)

    async def list_sessions(self, *, limit: int | None = None) -> list[Session]:
        """Newest first."""
        return await self._store.list_sessions(limit=limit)

    async def get_session(self, session_id: str) -> Session:
        return await self._store.get_session(session_id)

    async def history(self, session_id: str) -> list[StoredMessage]:
        """The session's messages in order (an unknown id raises SessionNotFoundError)."""
        await self._store.get_session(session_id)
        return await self._store.read_messages(session_id)

    async def expiries(self, session_id: str) -> dict[str, Expiry]:
        """The expiry records of the session's expired messages, by message id (see
        :mod:`plait.domain.retention`; none on a store without retention)."""
        return await expiries_of(self._store, session_id)

    async def message_numbered(self, session_id: str, number: int) -> StoredMessage | None:
        """The message with that number (its seq, 1-based, as ``plait history`` prints
        it), if the session has one."""
        if number < 1:
            return None
        found = await self._store.read_messages(session_id, after=number - 1, limit=1)
        return found[0] if found else None

    async def message_seq(self, session_id: str, message_id: str) -> int | None:
        """The seq of a message of the session (None: not there, or a store that cannot
        fork and so does not index messages by id)."""
        if not self._store.capabilities.forks:
            return None
        return await cast("ForkStore", self._store).message_seq(session_id, message_id)

    async def list_summaries(self, session_id: str) -> list[Summary]:
        """Every activated summary of the session, oldest first (none: a store without
        compaction support)."""
        if not self._store.capabilities.summaries:
            return []
        return await cast("SummaryStore", self._store).list_summaries(session_id)

    async def list_constraints(self, session_id: str) -> list[Constraint]:
        """The session's constraint records (none: a store without compaction support)."""
        if not self._store.capabilities.summaries:
            return []
        return await cast("SummaryStore", self._store).list_constraints(session_id)

    async def list_approvals(
        self, *, session_id: str | None = None, run_id: str | None = None
    ) -> list[Approval]:
        """Approval requests, newest first (none: a store that keeps no approvals). A
        session's requests include those of its sub-agents' child runs: one inbox."""
        if not self._store.capabilities.approvals:
            return []
        lister = cast("ApprovalStore", self._store).list_approvals
        found = await lister(session_id=session_id, run_id=run_id)
        if session_id is not None:
            for child in await sub_agent_sessions(self._store, session_id):
                found += await lister(session_id=child, run_id=run_id)
            found.sort(key=lambda approval: approval.requested_at, reverse=True)
        return found

    async def parents(self, approvals: Sequence[Approval]) -> dict[str, ParentCall]:
        """The parent call of each approval's run that is a sub-agent's, by run id."""
        return await parent_calls(self._store, approvals)

    async def list_runs(self, *, session_id: str | None = None) -> list[Run]:
        """Newest first; an unknown session raises SessionNotFoundError."""
        return await self._store.list_runs(session_id=session_id)

    async def get_run(self, run_id: str) -> Run:
        return await self._store.get_run(run_id)

    async def session_model(self, session_id: str) -> str | None:
        """The model spec a session remembers: the one it was created with, else the one
        its first run recorded, else (a branch) its parent's; None when none is known.
        An unknown session raises SessionNotFoundError."""
        session = await self._store.get_session(session_id)
        if session.model:
            return session.model
        runs = await self._store.list_runs(session_id=session_id)
        specs = [r.model_spec for r in sorted(runs, key=lambda run: run.started_at) if r.model_spec]
        if specs:
            return specs[0]
        if session.fork_origin is not None:
            return await self.session_model(session.fork_origin.parent_session_id)
        return None

    async def fork_record(self, session_id: str) -> ForkRecord | None:
        """How a branch was made (None for a session that is not a fork, or a store that
        cannot fork)."""
        if not self._store.capabilities.forks:
            return None
        return await cast("ForkStore", self._store).get_fork_record(session_id)

    async def run_detail(self, run_id: str) -> RunDetail:
        run = await self._store.get_run(run_id)
        return RunDetail(run=run, executions=await self._store.get_executions(run_id))

    async def artifact(self, artifact_id: str) -> tuple[ArtifactRef, bytes]:
        return await self._artifacts.get_artifact(artifact_id)

    async def live_leases(self, *, run_id: str | None = None) -> list[LeaseInfo]:
        """Running runs (or the one named) whose lease has not expired yet: recovery
        leaves them alone until it does, since their process may still be working."""
        now = self._clock.now()
        if run_id:
            runs = [await self._store.get_run(run_id)]
        else:
            runs = await self._store.list_leased_runs(now=now, status=RunStatus.RUNNING)
        return [
            LeaseInfo(r, r.lease.owner, r.lease.expires_at, r.lease.expires_at - now)
            for r in runs
            if r.status is RunStatus.RUNNING and r.lease is not None and r.lease.expires_at > now
        ]
