"""Fork a session from a complete point in its history (docs/design.md#forks).

``fork_session(source, through, request_id, caller)``:

1. A retried request (same caller, same request id) finds its branch by the branch id
   derived from the two and returns it; the same id with other arguments is a conflict.
2. The caller must be allowed to read the source (its owner, or anyone when it has no
   owner). A refusal is answered exactly like an unknown session, so it reveals nothing.
3. The fork point is located at one fixed source version. History is append-only, so the
   prefix ``1..seq`` can never change afterwards: messages appended to the source later
   (even while this fork runs) are simply not part of it.
4. The point must end a complete unit (:mod:`plait.domain.units`); otherwise
   :class:`~plait.domain.errors.InvalidCutPointError` names the nearest valid points before
   and after, and nothing is created. Only a window of messages around the point is read.
5. Optionally a workspace snapshot is taken (git work trees only).
6. The store creates the branch, its membership rows and the request record in one
   transaction.

A branch has its own id, version, runs and later messages. It inherits no run, no
execution record and no approval: copied tool calls are history, never work to redo.
It is bound to the source's workspace as it is *now* (files are not rolled back) unless a
snapshot binds it to a separate worktree.

Summaries and constraint records are inherited by the rules of
:mod:`plait.application.fork_summaries` (never a summary that covers a message after the
fork point, or whose source digest does not match the branch's prefix).
"""

from __future__ import annotations

from dataclasses import replace

from plait.application.fork_summaries import SummaryInheritance
from plait.application.ports import (
    Clock,
    ForkableStore,
    ForkCommit,
    RunTelemetry,
    WorkspaceSnapshots,
)
from plait.domain.errors import (
    ConfigError,
    ConflictError,
    InvalidCutPointError,
    MessageNotFoundError,
    SessionNotFoundError,
    ValidationError,
)
from plait.domain.forks import ForkRecord, WorkspaceSnapshot, branch_id_for
from plait.domain.record import record
from plait.domain.session import ForkOrigin, Session, StoredMessage
from plait.domain.units import CutPoints, locate_cut

__all__ = ["ForkResult", "ForkService", "can_read"]

_FIRST_WINDOW = 8
"""Messages read on each side of the fork point to check it; widened only when a unit is
longer than that."""


@record
class ForkResult:
    branch: Session
    record: ForkRecord
    created: bool
    """False when a retried request returned the branch made the first time."""


def can_read(session: Session, caller: str | None) -> bool:
    """The access rule for a session's history: its owner, or anyone when it has none
    (local, single-user use)."""
    return session.owner is None or session.owner == caller


def _check_ids(source_session_id: str, through_message_id: str, request_id: str) -> None:
    for name, value in (
        ("source session id", source_session_id),
        ("through message id", through_message_id),
        ("request id", request_id),
    ):
        if not isinstance(value, str) or not value.strip():
            raise ValidationError(f"the {name} must be a non-empty string", field=name)


def _branch(source: Session, record: ForkRecord, taken: WorkspaceSnapshot | None) -> Session:
    """The branch as created (the store gives it the prefix; its version follows)."""
    return Session(
        id=record.branch_session_id,
        created_at=record.created_at,
        owner=record.caller,
        workspace=source.workspace if taken is None else taken.worktree,
        fork_origin=ForkOrigin(
            parent_session_id=source.id, fork_point_message_id=record.through_message_id
        ),
        title=source.title,
        model=source.model,
    )


class ForkService:
    """Forks sessions over a :class:`~plait.application.ports.ForkableStore`."""

    def __init__(
        self,
        *,
        store: ForkableStore,
        clock: Clock,
        snapshots: WorkspaceSnapshots | None = None,
        telemetry: RunTelemetry | None = None,
    ) -> None:
        self.store = store
        self.clock = clock
        self.snapshots = snapshots
        self.telemetry = telemetry
        """Told of each branch made, with the source session's trace (``None``: off)."""
        self.summaries = SummaryInheritance(store)

    async def fork_session(
        self,
        source_session_id: str,
        through_message_id: str,
        request_id: str,
        caller: str | None = None,
        *,
        snapshot: bool = False,
    ) -> ForkResult:
        """Make a branch holding ``source_session_id``'s history up to and including
        ``through_message_id``. See the module docstring for the rules."""
        _check_ids(source_session_id, through_message_id, request_id)
        branch_id = branch_id_for(caller, request_id)
        earlier = await self.store.get_fork_record(branch_id)
        if earlier is not None:
            return await self._repeat(earlier, source_session_id, through_message_id, snapshot)
        source = await self.readable(source_session_id, caller)
        seq = await self._fork_point(source, through_message_id)
        inherited = await self.summaries.choose(source.id, seq)
        taken = self._snapshot(source, branch_id) if snapshot else None
        record = ForkRecord(
            branch_session_id=branch_id,
            request_id=request_id,
            caller=caller,
            source_session_id=source.id,
            through_message_id=through_message_id,
            through_seq=seq,
            source_version=source.version,
            created_at=self.clock.now(),
            snapshot_requested=snapshot,
            snapshot=taken,
        )
        branch = _branch(source, record, taken)
        try:
            stored = await self.store.fork_session(ForkCommit(branch=branch, record=record))
        except BaseException:
            self._discard(taken)
            raise
        if stored != record:  # a concurrent retry of the same request committed first
            self._discard(taken)
            return await self._repeat(stored, source.id, through_message_id, snapshot)
        await self.summaries.install(branch_id, inherited)
        if self.telemetry is not None:
            self.telemetry.forked(source.id, branch, await self._source_trace(source.id))
        return ForkResult(replace(branch, version=seq), record, created=True)

    async def _source_trace(self, session_id: str) -> str | None:
        """The trace context of the source session's latest run that has one."""
        runs = await self.store.list_runs(session_id=session_id)
        traced = [r for r in runs if r.trace_context]
        return max(traced, key=lambda run: run.started_at).trace_context if traced else None

    async def _fork_point(self, source: Session, through_message_id: str) -> int:
        """The seq of ``through_message_id`` once it is known to end a complete unit."""
        seq = await self.store.message_seq(source.id, through_message_id)
        if seq is None:
            raise MessageNotFoundError(
                f"message {through_message_id!r} is not in session {source.id!r}; "
                f"list its messages with: plait history {source.id}",
                session_id=source.id,
                message_id=through_message_id,
            )
        await self._check_cut(source.id, through_message_id, seq, source.version)
        return seq

    async def readable(self, session_id: str, caller: str | None) -> Session:
        """The session if ``caller`` may read it; otherwise the same error as for an
        unknown session, so a refusal tells nothing about what exists."""
        try:
            session = await self.store.get_session(session_id)
        except SessionNotFoundError:
            session = None
        if session is None or not can_read(session, caller):
            raise SessionNotFoundError(f"session {session_id!r} not found", session_id=session_id)
        return session

    async def family(self, session_id: str, caller: str | None = None) -> list[Session]:
        """The session's whole family of forks (its root and every descendant) that the
        caller may read, oldest first."""
        await self.readable(session_id, caller)
        sessions = {session.id: session for session in await self.store.list_sessions()}
        root = session_id
        while True:
            origin = sessions[root].fork_origin if root in sessions else None
            if origin is None or origin.parent_session_id not in sessions:
                break
            root = origin.parent_session_id
        children: dict[str, list[Session]] = {}
        for session in sessions.values():
            if session.fork_origin is not None:
                children.setdefault(session.fork_origin.parent_session_id, []).append(session)
        out: list[Session] = []
        todo = [sessions[root]]
        while todo:
            session = todo.pop()
            if can_read(session, caller):
                out.append(session)
            todo.extend(
                sorted(
                    children.get(session.id, ()), key=lambda child: child.created_at, reverse=True
                )
            )
        return out

    # --- steps ------------------------------------------------------------------------------

    async def _repeat(
        self, record: ForkRecord, source_id: str, through_id: str, snapshot: bool
    ) -> ForkResult:
        if not record.same_request(source_id, through_id, snapshot):
            raise ConflictError(
                f"request id {record.request_id!r} was already used to fork session "
                f"{record.source_session_id!r} through {record.through_message_id!r}"
                f"{' with a snapshot' if record.snapshot_requested else ''} "
                f"(branch {record.branch_session_id}); use a new request id for a "
                "different fork",
                request_id=record.request_id,
                branch_session_id=record.branch_session_id,
            )
        branch = await self.store.get_session(record.branch_session_id)
        return ForkResult(branch, record, created=False)

    async def _check_cut(self, sid: str, through_id: str, seq: int, version: int) -> None:
        width = _FIRST_WINDOW
        while True:
            lo = max(0, seq - width)
            hi = min(version, seq + width)
            window = await self.store.read_messages(sid, after=lo, limit=hi - lo)
            found = locate_cut(
                [s.message for s in window], seq - lo - 1, from_start=lo == 0, to_end=hi == version
            )
            if found is not None:
                break
            width *= 4
        if not found.valid:
            raise _cut_error(sid, through_id, seq, found, window)

    def _snapshot(self, source: Session, branch_id: str) -> WorkspaceSnapshot:
        if source.workspace is None:
            raise ConfigError(
                f"session {source.id!r} has no workspace, so there is nothing to snapshot; "
                "fork without --snapshot",
                session_id=source.id,
            )
        if self.snapshots is None:
            raise ConfigError("workspace snapshots are not available in this runtime")
        return self.snapshots.take(
            source.workspace,
            name=branch_id,
            message=f"plait: workspace snapshot for branch {branch_id} of session {source.id}",
        )

    def _discard(self, taken: WorkspaceSnapshot | None) -> None:
        if taken is not None and self.snapshots is not None:
            self.snapshots.discard(taken)


def _cut_error(
    sid: str, through_id: str, seq: int, found: CutPoints, window: list[StoredMessage]
) -> InvalidCutPointError:
    def point(index: int | None) -> tuple[str | None, int | None, str]:
        if index is None:
            return None, None, "none"
        sm = window[index]
        return sm.message.id, sm.seq, f"{sm.message.id} (#{sm.seq})"

    before, before_seq, before_text = point(found.before)
    after, after_seq, after_text = point(found.after)
    return InvalidCutPointError(
        f"cannot fork session {sid!r} through message {through_id!r} (#{seq}): it does not "
        "end a complete unit (a tool call there is still without its result); nearest valid "
        f"points: before {before_text}, after {after_text}",
        session_id=sid,
        through_message_id=through_id,
        through_seq=seq,
        before=before,
        before_seq=before_seq,
        after=after,
        after_seq=after_seq,
    )
