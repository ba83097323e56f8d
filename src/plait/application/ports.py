"""Ports: what the application needs from the outside world (docs/architecture.md).

Adapters implement these Protocols; the application never imports a concrete adapter.
Optional abilities are declared as data (capability values), not as methods that raise.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, Literal, Protocol

from plait.application.arguments import check_at_registration
from plait.domain.messages import ArtifactRef, Message, ToolCall, Usage, VendorState

if TYPE_CHECKING:
    import asyncio

    from plait.application.events import RunEvent
    from plait.domain.context import Context
    from plait.domain.forks import ForkRecord, WorkspaceSnapshot
    from plait.domain.governance import Approval, ApprovalUse
    from plait.domain.retention import Expiry, Tombstone
    from plait.domain.runs import Run, RunStatus
    from plait.domain.service import ApiKey, NewRunEvent, RunEventRecord
    from plait.domain.session import ExecutionRecord, Session, StoredMessage
    from plait.domain.summary import Constraint, Summary
    from plait.domain.tools import EffectClass, ToolSpec
    from plait.domain.webhooks import (
        Delivery,
        DeliveryAttempt,
        DeliveryJob,
        DeliveryStatus,
        Endpoint,
    )

__all__ = [
    "ApprovalInbox",
    "ApprovalStore",
    "ArtifactStore",
    "CarriedEvents",
    "CarriesEvents",
    "Clock",
    "Commit",
    "CommitResult",
    "ContextRead",
    "EventCarrier",
    "ForkCommit",
    "ForkStore",
    "ForkableStore",
    "HistoryRead",
    "IdGenerator",
    "KeyStore",
    "LeaseStore",
    "LeftoverSweeper",
    "ModelCapabilities",
    "ModelClient",
    "ModelRequest",
    "ModelResponse",
    "ModelRole",
    "QueuedCommits",
    "RawToolCall",
    "RetentionStore",
    "RunQueue",
    "RunStore",
    "RunTelemetry",
    "SessionHistory",
    "SessionStore",
    "StoreCapabilities",
    "SummaryStore",
    "TextSink",
    "TokenCountStore",
    "TokenMeter",
    "Tool",
    "ToolExecutor",
    "ToolInvocation",
    "ToolOutput",
    "WebhookSender",
    "WebhookStore",
    "WorkspaceSnapshots",
]

ModelRole = Literal["assistant", "reviewer", "summarizer"]


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelCapabilities:
    """What an adapter can do. A run checks what it needs when it starts."""

    tool_calls: bool = True
    structured_output: bool = False
    streaming: bool = False
    parallel_tool_calls: bool = True
    context_window: int | None = None
    max_output_tokens: int | None = None
    reasoning: bool = False
    price_input_per_mtok: float | None = None
    """USD per million input tokens; ``None`` when unknown (a cost ceiling then fails)."""
    price_output_per_mtok: float | None = None
    price_cached_input_per_mtok: float | None = None


TextSink = Callable[[str], None]
"""Receives model text as it streams in (deltas, in order). Display only: the persisted
message is the complete, validated response."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelRequest:
    role: ModelRole
    context: Context[Any]
    max_output_tokens: int | None = None
    on_text: TextSink | None = None
    """Set to stream: adapters that can stream call it with each text delta."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RawToolCall:
    """A tool call as the model produced it, before validation. ``arguments`` is the raw
    JSON text (or an already decoded value, for providers that send objects)."""

    id: str | None
    name: str
    arguments: str | dict[str, Any]


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelResponse:
    text: str = ""
    tool_calls: tuple[RawToolCall, ...] = ()
    usage: Usage = field(default_factory=Usage)
    model: str | None = None
    vendor_state: VendorState | None = None
    structured: Any = None
    """For roles that expect a structured value (reviewer, summarizer): the decoded JSON."""


class ModelClient(Protocol):
    """Turns a Context into a response. Raises :class:`~plait.domain.errors.ModelError`
    with a normalized ``model_code`` for provider failures."""

    @property
    def name(self) -> str: ...

    @property
    def capabilities(self) -> ModelCapabilities: ...

    async def complete(self, request: ModelRequest) -> ModelResponse: ...


class TokenMeter(Protocol):
    """Counts tokens the way one model family does (exact where its tokenizer is available
    offline, otherwise a conservative estimate). Callers cache per-message counts."""

    @property
    def name(self) -> str: ...

    @property
    def exact(self) -> bool: ...

    def count_text(self, text: str) -> int: ...

    def count_message(self, message: Message) -> int: ...

    def count_tools(self, tools: tuple[ToolSpec, ...]) -> int: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolInvocation:
    """One execution of a validated, recorded call."""

    call: ToolCall
    session_id: str
    run_id: str
    workspace: str | None
    idempotency_key: str
    """Stable across re-executions of the same call: pass it on to deduplicate."""
    output_cap_bytes: int = 32_000
    """How much output the model will see; a tool producing more should spool the whole
    output to a file (:attr:`ToolOutput.spool_path`) rather than hold it in memory."""
    time_limit_seconds: float | None = None
    """The time limit the runner enforces on this call (None: none). At the limit the
    executor's task is cancelled; work it handed to a thread cannot be cancelled and must
    stop by this limit on its own (see "Writing tools" in the README)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolOutput:
    content: str
    media_type: str = "text/plain"
    failed: bool = False
    """True when the tool ran but reports failure (e.g. a command exited non-zero)."""
    spool_path: str | None = None
    """The whole output, when the tool wrote it to a temporary file instead of holding it
    in memory (``content`` is then a capped view). The runner moves the file into an
    artifact and removes it."""


class ToolExecutor(Protocol):
    """Runs a call. Raise :class:`~plait.domain.errors.ToolError` for failures the model
    should read; any other exception is reported as an internal tool failure."""

    async def __call__(self, invocation: ToolInvocation) -> ToolOutput: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class Tool:
    spec: ToolSpec
    execute: ToolExecutor
    stoppable: bool = True
    """Cancelling the executor's task really stops it. When False, a cancelled run waits
    for the call to finish (within its timeout) and records what really happened."""
    effect_of: Callable[[dict[str, Any]], EffectClass] | None = None
    """The effect class of one call, from its arguments, where the tool can prove more
    than ``spec.effect`` says: e.g. a compare-and-write with a content hash is
    idempotent. Recorded with the call when it is requested, so recovery uses it."""
    own_deadline: bool = False
    """The call keeps to a deadline of its own (a sub-agent's child run, whose budget is
    within the run's): the run's ``tool_timeout_seconds`` does not apply to it, only the
    run's deadline."""

    def __post_init__(self) -> None:
        check_at_registration(self.spec)  # a bad schema is refused here, naming the tool


class Clock(Protocol):
    def now(self) -> float:
        """Wall-clock time, seconds since the epoch (UTC)."""
        ...

    def monotonic(self) -> float:
        """Seconds on a monotonic clock, for deadlines."""
        ...


class IdGenerator(Protocol):
    def new(self, prefix: str) -> str:
        """A fresh id like ``msg_01J...``; unique across processes."""
        ...


@dataclass(frozen=True, slots=True, kw_only=True)
class Commit:
    """One atomic write: messages appended at ``expected_version + 1 ...``, the run's new
    state and execution records, all or nothing. ``expected_version=None`` (``start_run``
    only; the busy check still applies): append after the session's last message.

    ``lease_owner`` fences the write: if the stored run is leased to someone else the
    commit fails with :class:`~plait.domain.errors.LeaseLostError`. ``lease_token`` (the
    :attr:`~plait.domain.runs.Run.lease_token` the writer's claim returned) fences it for
    real: if the run (``run``, else ``lease_run_id``) has been claimed since, or has
    ended, the commit fails the same way and nothing of it is written, also when the run
    holds no lease now (a process that took it over released it). ``session_owner``: the
    session must be this owner's, else :class:`~plait.domain.errors.SessionNotFoundError`
    as if it did not exist. A terminal run status releases the session.
    """

    session_id: str
    expected_version: int | None
    messages: tuple[Message, ...] = ()
    run: Run | None = None
    executions: tuple[ExecutionRecord, ...] = ()
    lease_owner: str | None = None
    session_owner: str | None = None
    lease_token: int | None = None
    lease_run_id: str | None = None
    """The run ``lease_token`` belongs to, for a commit that writes no run (a tool result):
    ``run.id`` otherwise."""


@dataclass(frozen=True, slots=True)
class CommitResult:
    version: int
    """The session version after the commit (the seq of its last message)."""
    cancel_requested: bool = False
    """Someone asked (maybe from another process) to cancel the committed run."""


@dataclass(frozen=True, slots=True, kw_only=True)
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


@dataclass(frozen=True, slots=True, kw_only=True)
class ForkCommit:
    """One atomic fork: create ``branch`` (empty, idle, with its fork origin), give it the
    source's messages ``1..record.through_seq`` (shared by id, bodies not copied where the
    store can share them) and store ``record``, all or nothing."""

    branch: Session
    record: ForkRecord


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


class WorkspaceSnapshots(Protocol):
    """Takes explicit workspace snapshots for forks (git work trees only)."""

    def take(self, workspace: str, *, name: str, message: str) -> WorkspaceSnapshot:
        """Commit the working tree (tracked and untracked, not ignored) on a private ref
        without touching the user's index, and check it out as a separate worktree.
        Raises :class:`~plait.domain.errors.ConfigError` for a workspace that is not in a
        git work tree."""
        ...

    def discard(self, snapshot: WorkspaceSnapshot) -> None:
        """Remove the worktree and the ref of a snapshot no branch uses."""
        ...


class RunQueue(Protocol):
    """Queued runs and their persisted events (service mode, docs/design.md#surfaces).

    A queued run is stored by :meth:`RunStore.start_run` with status ``queued`` and
    no lease; a worker takes it with :meth:`claim_queued_run`.
    """

    @property
    def capabilities(self) -> StoreCapabilities:
        """The store's (``starting_queue``: it also claims and starts in one write)."""
        ...

    async def claim_queued_run(self, *, owner: str, now: float, expires_at: float) -> Run | None:
        """Lease the oldest ``queued`` run that is free (no lease, or an expired one) to
        ``owner``, atomically (two workers never get the same run), with a new lease
        token (as :meth:`LeaseStore.claim_run`); ``None`` if none."""
        ...

    async def count_queued_runs(self, *, now: float) -> int:
        """How many ``queued`` runs no worker holds a live lease on at ``now`` (the
        queue's depth, for telemetry): a run claimed by :meth:`claim_queued_run` stays
        ``queued`` until its worker starts it, and is not counted."""
        ...

    async def append_run_events(
        self, run_id: str, events: Sequence[NewRunEvent], *, lease_token: int | None = None
    ) -> list[RunEventRecord]:
        """Number the events after the run's last one (``seq`` from 1, no gaps) and store
        them in one write. ``lease_token``: the writer's token (see :class:`Commit`); a
        stale one is refused with :class:`~plait.domain.errors.LeaseLostError`, nothing
        written."""
        ...

    async def read_run_events(
        self, run_id: str, *, after: int = 0, limit: int | None = None
    ) -> list[RunEventRecord]:
        """Events with ``seq > after`` in order (an unknown run has none)."""
        ...

    async def append_run_events_batch(
        self,
        batch: Mapping[str, Sequence[NewRunEvent]],
        *,
        lease_tokens: Mapping[str, int] | None = None,
    ) -> dict[str, list[RunEventRecord]]:
        """:meth:`append_run_events` for several runs in one durable write (a worker
        flushes the events of every run it drives at once). A run whose token in
        ``lease_tokens`` is stale gets none of its events written (an empty list back);
        the other runs' are written."""
        ...


@dataclass(frozen=True, slots=True)
class CarriedEvents:
    """Run events a commit takes from an :class:`EventCarrier`: per run, in order, with
    the lease token each run's are fenced by."""

    events: Mapping[str, tuple[NewRunEvent, ...]]
    tokens: Mapping[str, int]

    def __bool__(self) -> bool:
        return bool(self.events)


class EventCarrier(Protocol):
    """Run events waiting to be written (a worker's), which a store that can
    (:class:`CarriesEvents`) writes inside a commit of one of the worker's runs: one
    transaction, one durable point for the step and the events emitted meanwhile."""

    def take(self, run_id: str, lease_token: int) -> CarriedEvents:
        """For a commit of ``run_id`` fenced by ``lease_token``: the events that are
        neither written nor being written, of that run (if every one was emitted under
        ``lease_token``) and of the carrier's other runs (each fenced by its own token: a
        run claimed since gets none written). Once a run's are taken, its later events
        wait for :meth:`settle` (they are numbered after these); nothing taken, nothing
        held."""
        ...

    def settle(
        self, carried: CarriedEvents, written: Mapping[str, Sequence[RunEventRecord]] | None
    ) -> None:
        """The commit that carried ``carried`` landed (``written``: per run, the events as
        numbered and written; none for a run fenced off) or failed (``None``: nothing of
        them was written; they are written on their own, as if never taken)."""
        ...


class CarriesEvents(Protocol):
    """A store that writes pending run events inside the commits of runs (see
    :class:`EventCarrier`): only commits fenced by a lease token carry any."""

    def attach_carrier(self, carrier: EventCarrier) -> None:
        """From now on, each commit of a run fenced by a lease token takes what
        ``carrier`` gives for it (:meth:`EventCarrier.take`)."""
        ...

    def detach_carrier(self, carrier: EventCarrier) -> None: ...


class WebhookStore(Protocol):
    """Webhook endpoints and their outbox (see :mod:`plait.domain.webhooks`). The store
    writes an event and its deliveries in the same transaction as the state change the
    event announces; these methods register endpoints and move deliveries along."""

    async def add_webhook(self, endpoint: Endpoint) -> None: ...

    async def put_webhook(self, endpoint: Endpoint) -> None:
        """Add, or update the url, events, secret and principal of the endpoint with that
        id, keeping its status, failures and deliveries (endpoints of the config)."""
        ...

    async def list_webhooks(self, *, principal: str | None = None) -> list[Endpoint]:
        """Every endpoint, or those registered by ``principal``."""
        ...

    async def get_webhook(self, endpoint_id: str) -> Endpoint:
        """Raises :class:`~plait.domain.errors.WebhookNotFoundError`."""
        ...

    async def remove_webhook(self, endpoint_id: str) -> None:
        """The endpoint and its deliveries; raises ``WebhookNotFoundError``."""
        ...

    async def resume_webhook(self, endpoint_id: str, *, now: float) -> Endpoint:
        """Active again, failure count reset, its pending deliveries due ``now``."""
        ...

    async def list_deliveries(
        self,
        *,
        endpoint_id: str | None = None,
        status: DeliveryStatus | None = None,
        principal: str | None = None,
        limit: int = 100,
    ) -> list[Delivery]:
        """Newest first; ``principal``: of that principal's endpoints only."""
        ...

    async def claim_deliveries(
        self, *, owner: str, now: float, expires_at: float, limit: int
    ) -> list[DeliveryJob]:
        """Lease up to ``limit`` due pending deliveries of active endpoints to ``owner``
        until ``expires_at`` (counting an attempt); one whose lease expired (its worker
        died mid-delivery) is due again. Two claimers never get the same delivery."""
        ...

    async def finish_delivery(self, attempt: DeliveryAttempt) -> None:
        """Record an attempt: delivered, or due again at ``retry_at`` (``None``: failed
        for good); the endpoint is paused after ``pause_after`` consecutive failures. A
        delivery no longer pending (another worker delivered it after this one's lease
        expired) is left as it is."""
        ...


class KeyStore(Protocol):
    """API keys, stored by their SHA-256 only."""

    async def add_api_key(self, key: ApiKey) -> None: ...

    async def find_api_key(self, key_hash: str) -> ApiKey | None: ...


class LeftoverSweeper(Protocol):
    """Removes what interrupted atomic writes left in a workspace (``.plait-*.tmp`` files
    that a killed process wrote but never renamed into place)."""

    def sweep(self, workspace: str, *, older_than: float) -> list[str]:
        """Remove such files last modified before ``older_than`` (epoch seconds; a live
        writer's fresh temporary file is left alone); return their paths."""
        ...


class RunTelemetry(Protocol):
    """Traces and metrics of runs (docs/design.md#surfaces), e.g. OpenTelemetry. The loop tells it
    when this process begins driving a run (a *segment*: the run's start, or its continuation
    after a crash, a worker's claim or a person's answer), every run event, and when the
    segment stops. Off (``None``), nothing is called."""

    def begin(self, run: Run, how: str) -> str | None:
        """This process starts driving ``run`` (``how``: ``started``, ``queued``,
        ``claimed``, ``recovered``, ``resumed``). Returns the trace context to store with
        the run when it has none yet (else ``None``); a run that has one continues that
        trace, its new span linked to the stored one."""
        ...

    def observe(self, event: RunEvent) -> None:
        """A run event (quick, must not raise)."""
        ...

    def end(self, run: Run, error: BaseException | None = None) -> None:
        """The segment ended: the run ended or waits (``run``'s status says which), or
        ``error`` stopped this process driving it (lease lost, store failure)."""
        ...

    def queue_depth(self, depth: int) -> None:
        """A worker polled the queue and saw ``depth`` queued runs."""
        ...

    def forked(self, source_session_id: str, session: Session, parent_trace: str | None) -> None:
        """A fork created ``session`` from ``source_session_id``; ``parent_trace``: the
        trace context of the source session's latest run, which the fork's span links to."""
        ...


class WebhookSender(Protocol):
    """POSTs one signed delivery; returns the HTTP status, raises ``OSError`` (or a
    subclass) when nothing came back (refused, reset, timed out). ``public_only``: the
    endpoint is a principal's, which may only reach public addresses (unless the
    deployment allows private networks)."""

    async def post(
        self, url: str, *, body: str, headers: Mapping[str, str], public_only: bool = False
    ) -> int: ...
