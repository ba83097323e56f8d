"""Ports of the stores: sessions and their history, runs and leases, artifacts, and what a
store may also keep (approvals, summaries, token counts, forks, retention), declared in
its :class:`StoreCapabilities`, and what a commit answers (:class:`CommitResult`); what
the application hands a store to write is in :mod:`.writes`."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import fields
from typing import TYPE_CHECKING, Protocol

from plait.domain.record import record

if TYPE_CHECKING:
    import asyncio

    from plait.application.ports.writes import Commit, ForkCommit
    from plait.domain.forks import ForkRecord
    from plait.domain.governance import Approval, ApprovalUse
    from plait.domain.messages import ArtifactRef, Message
    from plait.domain.retention import Expiry, Tombstone
    from plait.domain.runs import Run, RunStatus
    from plait.domain.session import ExecutionRecord, Session, StoredMessage
    from plait.domain.summary import Constraint, Summary

__all__ = [
    "ApprovalInbox",
    "ApprovalStore",
    "ArtifactStore",
    "CommitResult",
    "ContextRead",
    "ForkStore",
    "ForkableStore",
    "HistoryRead",
    "LeaseStore",
    "QueuedCommits",
    "RetentionStore",
    "RunStore",
    "SessionHistory",
    "SessionStore",
    "StoreCapabilities",
    "SummaryStore",
    "TokenCountStore",
]


@record
class CommitResult:
    version: int
    """The session version after the commit (the seq of its last message)."""
    cancel_requested: bool = False
    """Someone asked (maybe from another process) to cancel the committed run."""


@record(kw_only=True)
class StoreCapabilities:
    """What a store can do beyond what every store does (:class:`SessionStore` and
    :class:`ArtifactStore`). Each flag names the port the store then implements as well;
    callers read these flags, never probe a store for its methods. A store declares one
    such value as its ``capabilities``."""

    approvals: bool = False
    """:class:`ApprovalStore`: approval requests and a person's decisions."""
    approval_inbox: bool = False
    """:class:`ApprovalInbox`: pages of pending approvals and waiting runs (the console)."""
    forks: bool = False
    """:class:`ForkStore`."""
    summaries: bool = False
    """:class:`SummaryStore`: summaries, constraints and ``search_history`` (recall)."""
    context_read: bool = False
    """:class:`ContextRead`: a step's summary and constraints in one read."""
    history_read: bool = False
    """:class:`HistoryRead`: a session and its whole history in one read."""
    token_counts: bool = False
    """:class:`TokenCountStore`: token counts kept beside the history."""
    retention: bool = False
    """:class:`RetentionStore`: expiring and restoring message bodies."""
    run_queue: bool = False
    """:class:`RunQueue`: queued runs and persisted run events (service mode)."""
    starting_queue: bool = False
    """:class:`~plait.application.claiming.StartingQueue`: claim and start in one write."""
    carried_events: bool = False
    """:class:`CarriesEvents`: a run's pending events written inside its next commit."""
    presence: bool = False
    """:class:`~plait.application.claiming.WorkerPresence`: a worker's runs are free as soon
    as its process dies, not when their leases expire."""
    webhooks: bool = False
    """:class:`WebhookStore`: endpoints and their outbox."""
    api_keys: bool = False
    """:class:`KeyStore`."""
    reserves_connections: bool = False
    """:class:`~plait.application.ports.ReservesConnections`: connections a worker
    reserves before its first claim."""
    commit_probe: bool = False
    """:class:`~plait.application.readiness.CommitProbe`: says whether it can commit now."""
    second_handle: bool = False
    """The same data can be opened again (another handle, another process) and every
    handle sees one state: false for ``memory://``, whose data lives in one object."""

    @classmethod
    def all_but(cls, *left_out: str) -> StoreCapabilities:
        """Every capability except those named (a ValueError names an unknown one)."""
        names = [flag.name for flag in fields(cls)]
        unknown = sorted(set(left_out) - set(names))
        if unknown:
            raise ValueError(f"no such store capability: {', '.join(unknown)}")
        return cls(**{name: name not in left_out for name in names})


class SessionHistory(Protocol):
    """Sessions and their append-only history (the store contract's session part)."""

    async def create_session(self, session: Session) -> None: ...

    async def get_session(self, session_id: str) -> Session: ...

    async def list_sessions(
        self, *, limit: int | None = None, owner: str | None = None, before: str | None = None
    ) -> list[Session]:
        """Newest first, at most ``limit``. ``owner``: only that owner's sessions (an
        index lookup, not a scan); ``before``: the page after the session with that id
        (the previous page's last; :class:`~plait.domain.errors.SessionNotFoundError` if
        it does not exist)."""
        ...

    async def read_messages(
        self, session_id: str, *, after: int = 0, limit: int | None = None
    ) -> list[StoredMessage]:
        """Messages with ``seq > after`` in order, at most ``limit``."""
        ...


class RunStore(Protocol):
    """Runs and their execution records, written with the history in one commit (the run
    and submit contracts)."""

    async def start_run(self, commit: Commit) -> CommitResult:
        """Insert ``commit.run`` and claim the session for it (fails with
        :class:`~plait.domain.errors.SessionBusyError` if another run holds it), together
        with ``commit.messages`` (the user message), atomically."""
        ...

    async def commit(self, commit: Commit) -> CommitResult: ...

    async def get_run(self, run_id: str) -> Run: ...

    async def list_runs(self, *, session_id: str | None = None) -> list[Run]: ...

    async def request_cancel(self, run_id: str) -> Run: ...

    async def get_executions(self, run_id: str) -> list[ExecutionRecord]: ...


class LeaseStore(Protocol):
    """Who drives a run: leases, fenced by a token (the fence contract)."""

    async def claim_run(self, run_id: str, *, owner: str, now: float, expires_at: float) -> Run:
        """Take the lease of a non-terminal run if it is free, expired or already ours,
        with a new :attr:`~plait.domain.runs.Run.lease_token` (one higher). Fails with
        :class:`~plait.domain.errors.LeaseLostError` otherwise."""
        ...

    async def renew_lease(
        self, run_id: str, *, owner: str, expires_at: float, lease_token: int | None = None
    ) -> None:
        """Move ``owner``'s lease to ``expires_at``; LeaseLostError if the run is not
        leased to ``owner`` or (``lease_token``) was claimed again since that token."""
        ...

    async def list_stale_runs(self, *, now: float, status: RunStatus | None = None) -> list[Run]:
        """Non-terminal runs whose lease has expired (or that hold none); ``status``: only
        runs in that status (a worker asks for ``running`` ones: queued runs are claimed,
        and a long queue need not be read at every sweep)."""
        ...

    async def list_leased_runs(self, *, now: float, status: RunStatus | None = None) -> list[Run]:
        """Non-terminal runs whose lease has not expired at ``now``, with their owners
        (a worker recovers those of an owner it knows to be dead; ``plait runs`` tells
        who holds what); ``status``: only runs in that status."""
        ...


class SessionStore(SessionHistory, RunStore, LeaseStore, Protocol):
    """Durable history, runs and execution records: what every store keeps.

    Append-only where the data is history. Every write is one transaction, durable when
    the call returns; no transaction is held open across calls. What else the store can
    do is declared in :attr:`capabilities`.
    """

    @property
    def capabilities(self) -> StoreCapabilities: ...

    async def close(self) -> None: ...


class QueuedCommits(Protocol):
    """Commit pipelining, which every store offers: a commit queued with
    :meth:`commit_soon` is applied after those queued before it, so a run may queue its
    next commit behind one still becoming durable (the run journal writes a tool's result
    behind this way). SQLite gets the order from its I/O thread; the other stores from
    ``adapters/stores/shared/pipeline.py``."""

    def commit_soon(
        self, commit: Commit, *, after: Callable[[], None] | None = None, hold: bool = False
    ) -> asyncio.Future[CommitResult]:
        """Queue ``commit`` now; later writes apply after it. ``after`` runs once it is
        durable, before them (a test's crash hook); ``hold``: its result may come back
        with the next write's (one wake-up for both)."""
        ...


class ArtifactStore(Protocol):
    """Immutable blobs addressed by id (large tool outputs)."""

    async def put_artifact(self, data: bytes, *, media_type: str) -> ArtifactRef: ...

    async def put_artifact_file(self, path: str, *, media_type: str) -> ArtifactRef:
        """Store a file's bytes as an artifact, streaming them (a large file is never held
        in memory whole). The file is left in place; the caller removes it."""
        ...

    async def get_artifact(self, artifact_id: str) -> tuple[ArtifactRef, bytes]: ...


class ApprovalStore(Protocol):
    """Approval requests and a person's decisions (docs/design.md#governance). The only source of
    authority for calls that need a person: nothing in history grants one.

    Each method is one atomic write or read. Approvals are bound to one session: a fork
    inherits none.
    """

    async def request_approval(
        self, approval: Approval, *, lease_token: int | None = None
    ) -> Approval:
        """Store a pending request. If the same call (session, run, call id) already has
        a pending one, that one is returned and nothing is written. ``lease_token``: the
        requesting run's token (see :class:`Commit`); a stale one is refused with
        :class:`~plait.domain.errors.LeaseLostError` and nothing is written."""
        ...

    async def get_approval(self, approval_id: str) -> Approval: ...

    async def list_approvals(
        self, *, session_id: str | None = None, run_id: str | None = None
    ) -> list[Approval]:
        """Newest first."""
        ...

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
        """Approve (for ``ttl_seconds``) or deny (with ``reason``) a *pending* request;
        anything else is a :class:`~plait.domain.errors.RunStateError`."""
        ...

    async def consume_approval(self, approval_id: str, use: ApprovalUse) -> Approval:
        """Mark an approval used by ``use.call_id``, atomically, if it authorizes
        ``use`` (else :class:`~plait.domain.errors.ApprovalRefusedError`). Consuming again
        for the same call returns the record unchanged; for another call it is refused."""


class ApprovalInbox(Protocol):
    """Pages of what waits for a person, across sessions (the console's inbox; the inbox
    contract)."""

    async def list_pending_approvals(
        self, *, owner: str | None = None, before: str | None = None, limit: int | None = None
    ) -> list[Approval]:
        """Pending approval requests, newest first, of sessions owned by ``owner``
        (``None``: everyone's); ``before``: the previous page's last approval id."""
        ...

    async def list_waiting_runs(
        self,
        status: RunStatus,
        *,
        owner: str | None = None,
        before: str | None = None,
        limit: int | None = None,
    ) -> list[Run]:
        """Runs in ``status`` (one not ended), newest first, of sessions owned by
        ``owner``; ``before``: the previous page's last run id."""
        ...


class TokenCountStore(Protocol):
    """Optional for a store: each message's token count per meter, kept beside the history
    so a process resuming a long session reads the counts instead of measuring every
    message again. ``meter`` is a meter's ``fingerprint`` (only meters declaring one are
    stored: the fingerprint names everything that decides their counts). Counts are a
    cache of a pure function of the message: a lost write only means counting again."""

    async def read_token_counts(self, session_id: str, meter: str) -> dict[str, int]:
        """Message id -> tokens by ``meter`` of the session's history (those stored)."""
        ...

    async def save_token_counts(
        self, session_id: str, meter: str, counts: Mapping[str, int]
    ) -> None:
        """Keep ``counts`` (message id -> tokens) of messages of the session's history;
        ids the session does not hold are ignored."""
        ...


class SummaryStore(Protocol):
    """Summaries, constraint records and full-text search over a session's raw history
    (compaction, docs/design.md#compaction). Raw history is never modified by any of these."""

    async def activate_summary(self, summary: Summary, *, expected_generation: int) -> None:
        """Make ``summary`` the session's active summary, atomically, if the session is
        still at summary generation ``expected_generation`` (``summary.generation`` must
        be one more) and ``summary`` covers a longer prefix than the active one; else
        :class:`~plait.domain.errors.SummaryConflictError` and nothing changes."""
        ...

    async def get_summary(self, session_id: str) -> Summary | None:
        """The active summary (the newest generation), or ``None``."""
        ...

    async def list_summaries(self, session_id: str) -> list[Summary]:
        """Every activated summary of the session, oldest generation first."""
        ...

    async def add_constraints(
        self, session_id: str, constraints: Sequence[Constraint]
    ) -> list[Constraint]:
        """Store the constraints not stored yet (same text from the same source message
        is stored once); returns those added."""
        ...

    async def list_constraints(self, session_id: str) -> list[Constraint]:
        """The session's constraint records in the order they were added."""
        ...

    async def search_history(
        self, session_id: str, query: str, *, through_seq: int | None = None, limit: int = 20
    ) -> list[StoredMessage]:
        """Messages of the session (``seq <= through_seq`` when given) whose searchable
        text contains every term of ``query`` ignoring case, newest first, at most
        ``limit`` (see :mod:`plait.domain.recall`)."""
        ...


class ContextRead(Protocol):
    """Optional for a store: what every step's context reads, in one read."""

    async def summary_and_constraints(
        self, session_id: str
    ) -> tuple[Summary | None, list[Constraint]]:
        """:meth:`SummaryStore.get_summary` and :meth:`SummaryStore.list_constraints` from
        one snapshot."""
        ...


class HistoryRead(Protocol):
    """Optional for a store: what a run starting or resuming reads, in one read."""

    async def read_history(self, session_id: str) -> tuple[Session, list[Message]]:
        """:meth:`SessionHistory.get_session` and the messages of
        :meth:`SessionHistory.read_messages` (all of them, without their seqs) from one
        snapshot; :class:`~plait.domain.errors.SessionNotFoundError` if there is no such
        session."""
        ...


class RetentionStore(Protocol):
    """Raw-history retention (:mod:`plait.domain.retention`): the one write that replaces
    message bodies, used only by the retention service, never by a run."""

    async def expire_messages(self, session_id: str, tombstones: Sequence[Tombstone]) -> list[str]:
        """In one transaction, replace the body of each message the session holds with its
        tombstone's redacted body and keep the tombstone's expiry record; returns the ids
        expired now (a message already expired is left as it is and not returned).

        Stores that share bodies between a session and its branches (memory, SQLite,
        PostgreSQL) show the tombstone in every branch at once; the JSONL store copies a
        branch's prefix into the branch's own file, so the caller expires a message in
        every session that holds it (the retention service does). Raises
        :class:`~plait.domain.errors.SessionNotFoundError` for an unknown session and
        :class:`~plait.domain.errors.MessageNotFoundError` (nothing written) if the
        session does not hold one of the messages."""
        ...

    async def expiries(self, session_id: str) -> dict[str, Expiry]:
        """The expiry records of the session's expired messages, by message id (empty for
        a session with none)."""
        ...

    async def restore_messages(self, session_id: str, messages: Sequence[Message]) -> list[str]:
        """The inverse of :meth:`expire_messages` (an archive being restored): put each
        original body back in place of its tombstone and drop its expiry record, in one
        transaction; returns the ids restored (a message that is not expired is left as
        it is). The caller has checked each original against its record's digest. Same
        sharing and errors as :meth:`expire_messages`."""
        ...


class ForkStore(Protocol):
    """The store side of a fork (docs/design.md#forks)."""

    async def message_seq(self, session_id: str, message_id: str) -> int | None:
        """The seq of a message in a session, or ``None`` if the session does not hold it.
        Raises :class:`~plait.domain.errors.SessionNotFoundError` for an unknown session."""
        ...

    async def fork_session(self, commit: ForkCommit) -> ForkRecord:
        """Create the branch atomically and return its record. If a session with the
        branch's id already exists, nothing is written and the stored record is returned
        (the caller compares it with its own; a plain session under that id is a
        :class:`~plait.domain.errors.ConflictError`). Raises
        :class:`~plait.domain.errors.MessageNotFoundError` if the source does not hold
        ``through_message_id`` at ``through_seq``."""
        ...

    async def get_fork_record(self, session_id: str) -> ForkRecord | None:
        """The record of the fork that created a session; ``None`` for an unknown session
        or one that was not made by a fork."""
        ...


class ForkableStore(SessionStore, ForkStore, SummaryStore, Protocol):
    """A session store that can fork (and hand summaries on to a branch)."""
