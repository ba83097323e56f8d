"""An in-memory store with the real semantics (versions, busy sessions, leases, fencing,
execution keys): it passes the same contract suite as the durable stores, so tests that use
it exercise the same rules. Nothing survives the process.

Every method runs to completion without awaiting, so concurrent tasks on one event loop
see each write as atomic; a lock makes it safe across threads too.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path

from plait.adapters.stores.memory.webhooks import MemoryWebhooks
from plait.adapters.stores.shared.approvals import (
    consume_in,
    decide_in,
    get_in,
    not_found,
    request_in,
    select,
)
from plait.adapters.stores.shared.fork import fork_state, prefix_seq, reject_plain_session
from plait.adapters.stores.shared.inbox_pages import check_waiting, newest_page
from plait.adapters.stores.shared.pipeline import PipelinedCommits
from plait.adapters.stores.shared.retention import check_restores, check_tombstones, replace_bodies
from plait.adapters.stores.shared.service_rows import ServiceBook
from plait.adapters.stores.shared.session_pages import OwnerIndex
from plait.adapters.stores.shared.state import (
    SessionState,
    artifact_not_found,
    artifact_ref,
    artifact_ref_of_file,
    check_new_session,
    check_token,
    claimed,
    closed_error,
    duplicate_run,
    duplicate_session,
    leased_runs,
    renewed,
    run_not_found,
    session_not_found,
    stale_runs,
    validate_commit,
)
from plait.adapters.stores.shared.summary_state import (
    SummaryBook,
    duplicate_summary,
    new_constraints,
)
from plait.application.ports import Commit, CommitResult, ForkCommit, StoreCapabilities
from plait.domain.errors import LeaseLostError, RunNotFoundError
from plait.domain.forks import ForkRecord
from plait.domain.governance import Approval, ApprovalStatus, ApprovalUse
from plait.domain.messages import ArtifactRef, Message
from plait.domain.recall import matches, search_terms
from plait.domain.retention import Expiry, Tombstone
from plait.domain.runs import Lease, Run, RunStatus
from plait.domain.service import ApiKey, NewRunEvent, RunEventRecord
from plait.domain.session import ExecutionRecord, Session, StoredMessage
from plait.domain.summary import Constraint, Summary
from plait.domain.webhooks import Delivery, DeliveryAttempt, DeliveryJob, DeliveryStatus, Endpoint

__all__ = ["MemoryStore"]


class MemoryStore(PipelinedCommits):
    """A :class:`~plait.application.ports.SessionStore` and
    :class:`~plait.application.ports.ArtifactStore` kept in dicts; what else it
    keeps is in :attr:`capabilities`."""

    capabilities = StoreCapabilities.all_but(
        "reserves_connections",
        "context_read",
        "token_counts",
        "starting_queue",
        "commit_probe",
        "second_handle",
        "presence",
        "carried_events",
    )

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._closed = False
        self._sessions: dict[str, SessionState] = {}
        self._owners = OwnerIndex()
        """Listing order per owner: a page never looks at other sessions."""
        self._run_sessions: dict[str, str] = {}
        """run id -> session id, in insertion order (ties in ``list_runs``)."""
        self._artifacts: dict[str, tuple[ArtifactRef, bytes]] = {}
        self._approvals: dict[str, Approval] = {}
        self._books: dict[str, SummaryBook] = {}
        self._summary_ids: set[str] = set()
        self._forks: dict[str, ForkRecord] = {}
        self._service = ServiceBook()
        self._webhooks = MemoryWebhooks()
        self._expired: dict[str, list[tuple[Message, Expiry]]] = {}
        """message id -> (tombstone body, record); the body object identifies it (ids are
        unique per session only)."""

    def __repr__(self) -> str:
        return f"MemoryStore(sessions={len(self._sessions)})"

    def _check_open(self) -> None:
        if self._closed:
            raise closed_error("memory")

    def _state(self, session_id: str) -> SessionState:
        state = self._sessions.get(session_id)
        if state is None:
            raise session_not_found(session_id)
        return state

    def _run_state(self, run_id: str) -> tuple[SessionState, Run]:
        sid = self._run_sessions.get(run_id)
        if sid is None:
            raise run_not_found(run_id)
        state = self._sessions[sid]
        return state, state.runs[run_id]

    def _all_runs(self) -> list[Run]:
        return [self._sessions[sid].runs[rid] for rid, sid in self._run_sessions.items()]

    # --- sessions -------------------------------------------------------------------------

    async def create_session(self, session: Session) -> None:
        with self._lock:
            self._check_open()
            check_new_session(session)
            if session.id in self._sessions:
                raise duplicate_session(session.id)
            self._sessions[session.id] = SessionState(session)
            self._owners.add(session.id, session.owner, session.created_at)

    async def get_session(self, session_id: str) -> Session:
        with self._lock:
            self._check_open()
            return self._state(session_id).session

    async def list_sessions(
        self, *, limit: int | None = None, owner: str | None = None, before: str | None = None
    ) -> list[Session]:
        with self._lock:
            self._check_open()
            ids = self._owners.newest_first(owner=owner, before=before)
            chosen = ids if limit is None else itertools.islice(ids, max(limit, 0))
            return [self._sessions[sid].session for sid in chosen]

    async def read_messages(
        self, session_id: str, *, after: int = 0, limit: int | None = None
    ) -> list[StoredMessage]:
        with self._lock:
            self._check_open()
            return self._state(session_id).read(after, limit)

    async def read_history(self, session_id: str) -> tuple[Session, list[Message]]:
        with self._lock:
            self._check_open()
            state = self._state(session_id)
            return state.session, [stored.message for stored in state.messages]

    # --- writes ---------------------------------------------------------------------------

    async def start_run(self, commit: Commit) -> CommitResult:
        validate_commit(commit, start=True)
        with self._lock:
            self._check_open()
            state = self._state(commit.session_id)
            assert commit.run is not None
            change = state.plan_start(commit)
            if commit.run.id in self._run_sessions:
                raise duplicate_run(commit.run.id)
            state.apply(change)
            self._run_sessions[commit.run.id] = state.session.id
            self._run_changed(state, None, commit.run.id)
            return state.result(change)

    async def commit(self, commit: Commit) -> CommitResult:
        validate_commit(commit, start=False)
        with self._lock:
            self._check_open()
            state = self._state(commit.session_id)
            change = state.plan_commit(commit)
            before = None if commit.run is None else state.runs.get(commit.run.id)
            state.apply(change)
            if commit.run is not None:
                self._run_changed(state, before, commit.run.id)
            return state.result(change)

    def _run_changed(self, state: SessionState, before: Run | None, run_id: str) -> None:
        """The webhook events of a run's new status, in the same write."""
        after = state.runs.get(run_id)
        if after is not None:
            self._webhooks.run_changed(before, after, state.session.owner, time.time())

    # --- retention ------------------------------------------------------------------------

    def _is_expired(self, message: Message) -> bool:
        return any(body is message for body, _ in self._expired.get(message.id, ()))

    def _share(self, session_id: str, old: Message, new: Message) -> None:
        """Branches share the body object: give them the new one too."""
        for state in self._sessions.values():
            if state.session.id == session_id:
                continue
            for index, sm in enumerate(state.messages):
                if sm.message is old:
                    state.messages[index] = StoredMessage(sm.seq, new)

    async def expire_messages(self, session_id: str, tombstones: Sequence[Tombstone]) -> list[str]:
        check_tombstones(tombstones)
        records = {t.message.id: t.expiry for t in tombstones}
        with self._lock:
            self._check_open()
            state = self._state(session_id)
            done = replace_bodies(state, [t.message for t in tombstones], self._is_expired)
            for old, body in done:
                self._share(session_id, old.message, body)
                self._expired.setdefault(body.id, []).append((body, records[body.id]))
            return [body.id for _, body in done]

    async def restore_messages(self, session_id: str, messages: Sequence[Message]) -> list[str]:
        check_restores(messages)
        with self._lock:
            self._check_open()
            state = self._state(session_id)
            done = replace_bodies(state, messages, lambda message: not self._is_expired(message))
            for old, body in done:
                self._share(session_id, old.message, body)
                kept = [(b, e) for b, e in self._expired[body.id] if b is not old.message]
                self._expired[body.id] = kept
            return [body.id for _, body in done]

    async def expiries(self, session_id: str) -> dict[str, Expiry]:
        with self._lock:
            self._check_open()
            out: dict[str, Expiry] = {}
            for sm in self._state(session_id).messages:
                for body, expiry in self._expired.get(sm.message.id, ()):
                    if body is sm.message:
                        out[sm.message.id] = expiry
            return out

    # --- forks ----------------------------------------------------------------------------

    async def message_seq(self, session_id: str, message_id: str) -> int | None:
        with self._lock:
            self._check_open()
            return prefix_seq(self._state(session_id), message_id)

    async def fork_session(self, commit: ForkCommit) -> ForkRecord:
        with self._lock:
            self._check_open()
            branch_id = commit.branch.id
            if branch_id in self._sessions:
                return self._forks.get(branch_id) or reject_plain_session(branch_id)
            self._sessions[branch_id] = fork_state(
                self._state(commit.record.source_session_id), commit
            )
            self._forks[branch_id] = commit.record
            branch = self._sessions[branch_id].session
            self._owners.add(branch_id, branch.owner, branch.created_at)
            return commit.record

    async def get_fork_record(self, session_id: str) -> ForkRecord | None:
        with self._lock:
            self._check_open()
            return self._forks.get(session_id)

    # --- runs -----------------------------------------------------------------------------

    async def get_run(self, run_id: str) -> Run:
        with self._lock:
            self._check_open()
            return self._run_state(run_id)[1]

    async def list_waiting_runs(
        self,
        status: RunStatus,
        *,
        owner: str | None = None,
        before: str | None = None,
        limit: int | None = None,
    ) -> list[Run]:
        """Runs in ``status`` (one waiting for a person), newest first, of sessions owned
        by ``owner`` (``None``: everyone's); ``before``: the previous page's last run id."""
        check_waiting(status)
        with self._lock:
            self._check_open()
            return newest_page(
                self._all_runs(),
                at=lambda run: run.started_at,
                id_of=lambda run: run.id,
                keep=lambda run: run.status is status and self._owned(run.session_id, owner),
                before=before,
                limit=limit,
                missing=run_not_found,
            )

    async def list_runs(self, *, session_id: str | None = None) -> list[Run]:
        with self._lock:
            self._check_open()
            if session_id is None:
                runs = self._all_runs()
            else:
                runs = list(self._state(session_id).runs.values())
        runs.reverse()
        runs.sort(key=lambda run: run.started_at, reverse=True)
        return runs

    async def request_cancel(self, run_id: str) -> Run:
        with self._lock:
            self._check_open()
            state, run = self._run_state(run_id)
            run = replace(run, cancel_requested=True)
            state.runs[run_id] = run
            return run

    async def get_executions(self, run_id: str) -> list[ExecutionRecord]:
        with self._lock:
            self._check_open()
            state, _ = self._run_state(run_id)
            return state.execution_list(run_id)

    async def claim_run(self, run_id: str, *, owner: str, now: float, expires_at: float) -> Run:
        with self._lock:
            self._check_open()
            state, run = self._run_state(run_id)
            run = claimed(run, owner=owner, now=now, expires_at=expires_at)
            state.runs[run_id] = run
            return run

    async def renew_lease(
        self, run_id: str, *, owner: str, expires_at: float, lease_token: int | None = None
    ) -> None:
        with self._lock:
            self._check_open()
            state, run = self._run_state(run_id)
            state.runs[run_id] = renewed(
                run, owner=owner, expires_at=expires_at, lease_token=lease_token
            )

    async def list_stale_runs(self, *, now: float, status: RunStatus | None = None) -> list[Run]:
        with self._lock:
            self._check_open()
            return stale_runs(self._all_runs(), now, status)

    async def list_leased_runs(self, *, now: float, status: RunStatus | None = None) -> list[Run]:
        with self._lock:
            self._check_open()
            return leased_runs(self._all_runs(), now, status)

    # --- service mode: queue, events, keys ------------------------------------------------

    async def claim_queued_run(self, *, owner: str, now: float, expires_at: float) -> Run | None:
        with self._lock:
            self._check_open()
            for run in sorted(self._all_runs(), key=lambda run: run.started_at):
                if run.status is RunStatus.QUEUED and (
                    run.lease is None or run.lease.expires_at <= now
                ):
                    claimed = replace(
                        run,
                        lease=Lease(owner=owner, expires_at=expires_at),
                        lease_token=run.lease_token + 1,
                    )
                    self._sessions[run.session_id].runs[run.id] = claimed
                    return claimed
            return None

    async def count_queued_runs(self, *, now: float) -> int:
        with self._lock:
            self._check_open()
            return sum(
                1
                for run in self._all_runs()
                if run.status is RunStatus.QUEUED
                and (run.lease is None or run.lease.expires_at <= now)
            )

    async def append_run_events(
        self, run_id: str, events: Sequence[NewRunEvent], *, lease_token: int | None = None
    ) -> list[RunEventRecord]:
        with self._lock:
            self._check_open()
            self._check_token(run_id, lease_token, events=True)
            return self._append_events(run_id, events)

    async def append_run_events_batch(
        self,
        batch: Mapping[str, Sequence[NewRunEvent]],
        *,
        lease_tokens: Mapping[str, int] | None = None,
    ) -> dict[str, list[RunEventRecord]]:
        tokens = lease_tokens or {}
        with self._lock:
            self._check_open()
            out: dict[str, list[RunEventRecord]] = {}
            for run_id, events in batch.items():
                try:
                    self._check_token(run_id, tokens.get(run_id), events=True)
                except LeaseLostError:
                    out[run_id] = []
                    continue
                out[run_id] = self._append_events(run_id, events)
            return out

    def _append_events(self, run_id: str, events: Sequence[NewRunEvent]) -> list[RunEventRecord]:
        written = self._service.append(run_id, events)
        if written and self._webhooks.endpoints and run_id in self._run_sessions:
            state, run = self._run_state(run_id)
            owner = state.session.owner
            self._webhooks.events_appended(run, owner, written[0].seq, events, time.time())
        return written

    def _check_token(self, run_id: str, lease_token: int | None, *, events: bool = False) -> None:
        """Fencing of a run's writes outside commits (events, approval requests). A run's
        last events are written after it ended (``events``): only its token counts."""
        if lease_token is None:
            return
        try:
            run: Run | None = self._run_state(run_id)[1]
        except RunNotFoundError:
            run = None
        check_token(
            run_id,
            None if run is None else run.lease_token,
            lease_token,
            ended=not events and run is not None and run.status.terminal,
            wanted=None,
        )

    async def read_run_events(
        self, run_id: str, *, after: int = 0, limit: int | None = None
    ) -> list[RunEventRecord]:
        with self._lock:
            self._check_open()
            return self._service.read(run_id, after, limit)

    async def add_api_key(self, key: ApiKey) -> None:
        with self._lock:
            self._check_open()
            self._service.add_key(key)

    async def find_api_key(self, key_hash: str) -> ApiKey | None:
        with self._lock:
            self._check_open()
            return self._service.find_key(key_hash)

    # --- artifacts ------------------------------------------------------------------------

    async def put_artifact(self, data: bytes, *, media_type: str) -> ArtifactRef:
        ref = artifact_ref(data, media_type)
        with self._lock:
            self._check_open()
            stored = self._artifacts.get(ref.id)
            if stored is not None:
                return stored[0]
            self._artifacts[ref.id] = (ref, bytes(data))
            return ref

    async def put_artifact_file(self, path: str, *, media_type: str) -> ArtifactRef:
        """The file's bytes (this store keeps everything in memory anyway)."""
        artifact_ref_of_file(path, media_type)  # clear error for an unreadable file
        return await self.put_artifact(_read_file(path), media_type=media_type)

    async def get_artifact(self, artifact_id: str) -> tuple[ArtifactRef, bytes]:
        with self._lock:
            self._check_open()
            stored = self._artifacts.get(artifact_id)
            if stored is None:
                raise artifact_not_found(artifact_id)
            return stored

    # --- approvals ------------------------------------------------------------------------

    def _keep(self, planned: tuple[Approval, bool]) -> Approval:
        approval, changed = planned
        if changed:
            self._approvals[approval.id] = approval
        return approval

    async def request_approval(
        self, approval: Approval, *, lease_token: int | None = None
    ) -> Approval:
        with self._lock:
            self._check_open()
            self._state(approval.session_id)
            self._check_token(approval.run_id, lease_token)
            planned = request_in(self._approvals, approval)
            kept = self._keep(planned)
            if planned[1]:  # a new request, not the one already pending for the call
                owner = self._state(approval.session_id).session.owner
                self._webhooks.approval_added(approval, owner, time.time())
            return kept

    async def get_approval(self, approval_id: str) -> Approval:
        with self._lock:
            self._check_open()
            return get_in(self._approvals, approval_id)

    async def list_approvals(
        self, *, session_id: str | None = None, run_id: str | None = None
    ) -> list[Approval]:
        with self._lock:
            self._check_open()
            return select(self._approvals, session_id=session_id, run_id=run_id)

    async def list_pending_approvals(
        self, *, owner: str | None = None, before: str | None = None, limit: int | None = None
    ) -> list[Approval]:
        """Pending approval requests, newest first, of sessions owned by ``owner``
        (``None``: everyone's); ``before``: the previous page's last approval id."""
        with self._lock:
            self._check_open()
            return newest_page(
                list(self._approvals.values()),
                at=lambda approval: approval.requested_at,
                id_of=lambda approval: approval.id,
                keep=lambda approval: (
                    approval.status is ApprovalStatus.PENDING
                    and self._owned(approval.session_id, owner)
                ),
                before=before,
                limit=limit,
                missing=not_found,
            )

    def _owned(self, session_id: str, owner: str | None) -> bool:
        state = self._sessions.get(session_id)
        return state is not None and (owner is None or state.session.owner == owner)

    async def decide_approval(
        self,
        approval_id: str,
        *,
        approve: bool,
        grantor: str,
        at: float,
        ttl_seconds: float | None = None,
        reason: str | None = None,
    ) -> Approval:
        with self._lock:
            self._check_open()
            planned = decide_in(
                self._approvals,
                approval_id,
                approve=approve,
                grantor=grantor,
                at=at,
                ttl_seconds=ttl_seconds,
                reason=reason,
            )
            return self._keep(planned)

    async def consume_approval(self, approval_id: str, use: ApprovalUse) -> Approval:
        with self._lock:
            self._check_open()
            return self._keep(consume_in(self._approvals, approval_id, use))

    # --- summaries, constraints, search ---------------------------------------------------

    def _book(self, session_id: str) -> SummaryBook:
        self._state(session_id)  # unknown session -> SessionNotFoundError
        return self._books.setdefault(session_id, SummaryBook())

    async def activate_summary(self, summary: Summary, *, expected_generation: int) -> None:
        with self._lock:
            self._check_open()
            book = self._book(summary.session_id)
            book.check(self._state(summary.session_id).session, summary, expected_generation)
            if summary.id in self._summary_ids:
                raise duplicate_summary(summary.id)
            book.summaries.append(summary)
            self._summary_ids.add(summary.id)

    async def get_summary(self, session_id: str) -> Summary | None:
        with self._lock:
            self._check_open()
            return self._book(session_id).active

    async def list_summaries(self, session_id: str) -> list[Summary]:
        with self._lock:
            self._check_open()
            return list(self._book(session_id).summaries)

    async def add_constraints(
        self, session_id: str, constraints: Sequence[Constraint]
    ) -> list[Constraint]:
        with self._lock:
            self._check_open()
            book = self._book(session_id)
            added = new_constraints(book.constraints, constraints)
            book.constraints.extend(added)
            return added

    async def list_constraints(self, session_id: str) -> list[Constraint]:
        with self._lock:
            self._check_open()
            return list(self._book(session_id).constraints)

    async def search_history(
        self, session_id: str, query: str, *, through_seq: int | None = None, limit: int = 20
    ) -> list[StoredMessage]:
        terms = search_terms(query)
        with self._lock:
            self._check_open()
            history = self._state(session_id).read(0, through_seq)
        hits = [sm for sm in reversed(history) if matches(terms, sm.message)]
        return hits[: max(limit, 0)]

    # --- webhooks (see webhooks.py) -------------------------------------------------------

    async def add_webhook(self, endpoint: Endpoint) -> None:
        with self._lock:
            self._check_open()
            self._webhooks.add(endpoint)

    async def put_webhook(self, endpoint: Endpoint) -> None:
        with self._lock:
            self._check_open()
            self._webhooks.put(endpoint)

    async def list_webhooks(self, *, principal: str | None = None) -> list[Endpoint]:
        with self._lock:
            self._check_open()
            return self._webhooks.listing(principal)

    async def get_webhook(self, endpoint_id: str) -> Endpoint:
        with self._lock:
            self._check_open()
            return self._webhooks.get(endpoint_id)

    async def remove_webhook(self, endpoint_id: str) -> None:
        with self._lock:
            self._check_open()
            self._webhooks.remove(endpoint_id)

    async def resume_webhook(self, endpoint_id: str, *, now: float) -> Endpoint:
        with self._lock:
            self._check_open()
            return self._webhooks.resume(endpoint_id, now)

    async def list_deliveries(
        self,
        *,
        endpoint_id: str | None = None,
        status: DeliveryStatus | None = None,
        principal: str | None = None,
        limit: int = 100,
    ) -> list[Delivery]:
        with self._lock:
            self._check_open()
            return self._webhooks.listing_deliveries(endpoint_id, status, principal, limit)

    async def claim_deliveries(
        self, *, owner: str, now: float, expires_at: float, limit: int
    ) -> list[DeliveryJob]:
        with self._lock:
            self._check_open()
            return self._webhooks.claim(now, expires_at, limit)

    async def finish_delivery(self, attempt: DeliveryAttempt) -> None:
        with self._lock:
            self._check_open()
            self._webhooks.finish(attempt)

    async def close(self) -> None:
        with self._lock:
            self._closed = True


def _read_file(path: str) -> bytes:
    return Path(path).read_bytes()
