"""The store contract as plain Python: the rules every adapter enforces, and the in-memory
state of one session that the memory and JSONL stores share.

A write is *planned* first (every check runs, nothing changes, a :class:`Change` comes
back) and then *applied*. The JSONL store persists the planned change as one line between
the two steps and replays the same ``apply`` when it loads a file, so both stores obey
exactly the same rules. The SQLite store enforces them in SQL but builds its errors here.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from plait.adapters.stores.shared.closed import closed_error
from plait.application.ports import CommitResult
from plait.domain.errors import (
    ArtifactNotFoundError,
    ConfigError,
    ConflictError,
    LeaseLostError,
    RunNotFoundError,
    SessionBusyError,
    SessionNotFoundError,
)
from plait.domain.messages import ArtifactRef, Message
from plait.domain.record import record
from plait.domain.runs import Lease, Run, RunStatus
from plait.domain.session import ExecutionRecord, ExecutionState, Session, StoredMessage

if TYPE_CHECKING:
    from plait.application.ports import Commit  # built by the application

__all__ = [
    "ARTIFACT_CHUNK",
    "STATE_ORDER",
    "Change",
    "SessionState",
    "artifact_not_found",
    "artifact_ref",
    "artifact_ref_of_file",
    "can_claim",
    "check_execution",
    "check_new_session",
    "check_token",
    "claimed",
    "closed_error",
    "duplicate_message",
    "duplicate_run",
    "duplicate_session",
    "lease_lost",
    "lease_taken",
    "leased_runs",
    "renewed",
    "resolve_lease",
    "run_not_found",
    "session_busy",
    "session_not_found",
    "stale_runs",
    "validate_commit",
    "version_conflict",
]

STATE_ORDER = {
    ExecutionState.REQUESTED: 0,
    ExecutionState.REVIEWED: 1,
    ExecutionState.STARTED: 2,
    ExecutionState.SETTLED: 3,
}

# --- errors -------------------------------------------------------------------------------


def session_not_found(session_id: str) -> SessionNotFoundError:
    return SessionNotFoundError(f"session {session_id!r} not found", session_id=session_id)


def run_not_found(run_id: str) -> RunNotFoundError:
    return RunNotFoundError(f"run {run_id!r} not found", run_id=run_id)


def duplicate_session(session_id: str) -> ConflictError:
    return ConflictError(f"session {session_id!r} already exists", session_id=session_id)


def duplicate_run(run_id: str) -> ConflictError:
    return ConflictError(f"run {run_id!r} already exists", run_id=run_id)


def duplicate_message(session_id: str, message_id: str) -> ConflictError:
    return ConflictError(
        f"message {message_id!r} is already stored in session {session_id!r}",
        session_id=session_id,
        message_id=message_id,
    )


def version_conflict(session_id: str, expected: int, actual: int) -> ConflictError:
    return ConflictError(
        f"session {session_id!r} is at version {actual}, the write expected {expected}: "
        "another writer appended first",
        session_id=session_id,
        expected=expected,
        actual=actual,
    )


def session_busy(session_id: str, active_run_id: str) -> SessionBusyError:
    return SessionBusyError(
        f"session {session_id!r} is busy: run {active_run_id!r} is active; wait for it, "
        "cancel it (plait runs cancel), resolve it if it awaits resolution, or, if its "
        "process died, recover it (plait runs recover)",
        session_id=session_id,
        active_run_id=active_run_id,
    )


def lease_lost(
    run_id: str, owner: str | None, expires_at: float | None, *, wanted: str | None
) -> LeaseLostError:
    if owner is None:
        text = f"run {run_id!r} cannot be leased to {wanted!r} (it has ended or holds no lease)"
    else:
        until = (
            "?"
            if expires_at is None
            else datetime.fromtimestamp(expires_at, tz=UTC).isoformat(timespec="seconds")
        )
        text = f"run {run_id!r} is leased to {owner!r} until {until}, not to {wanted!r}"
    return LeaseLostError(
        text,
        run_id=run_id,
        owner=owner,
        expires_at=expires_at,
        wanted=wanted,
    )


def lease_taken(
    run_id: str, stored_token: int | None, token: int, *, ended: bool, wanted: str | None
) -> LeaseLostError:
    """A write fenced off by its lease token: the run was claimed again since the writer's
    claim (``stored_token`` is the newer claim's; ``None``: no such run), or has ended."""
    why = (
        "has ended"
        if ended
        else "does not exist"
        if stored_token is None
        else f"was taken over since (lease token {stored_token} now, the write carries {token})"
    )
    return LeaseLostError(
        f"run {run_id!r} {why}: the write of {wanted or 'its old holder'} is refused and "
        "nothing of it is written",
        run_id=run_id,
        lease_token=stored_token,
        wanted_token=token,
        wanted=wanted,
    )


def check_token(
    run_id: str,
    stored_token: int | None,
    lease_token: int | None,
    *,
    ended: bool,
    wanted: str | None,
) -> None:
    """Fencing: a write carrying ``lease_token`` is refused unless the run is still at that
    token (nobody claimed it since) and has not ended."""
    if lease_token is not None and (stored_token != lease_token or ended):
        raise lease_taken(run_id, stored_token, lease_token, ended=ended, wanted=wanted)


def artifact_not_found(artifact_id: str) -> ArtifactNotFoundError:
    return ArtifactNotFoundError(f"artifact {artifact_id!r} not found", artifact_id=artifact_id)


# --- rules --------------------------------------------------------------------------------


def check_new_session(session: Session) -> None:
    if session.version != 0 or session.active_run_id is not None:
        raise ConfigError(
            f"a new session starts empty and idle (version 0, no active run); "
            f"got version {session.version}, active run {session.active_run_id!r}",
            session_id=session.id,
        )


def validate_commit(commit: Commit, *, start: bool) -> None:
    """Checks that need no stored state: misuse is a ConfigError, raised before any I/O."""
    sid = commit.session_id
    expected = commit.expected_version
    if expected is None and not start:
        raise ConfigError(
            "expected_version=None (append at the end) is only for start_run; a commit "
            "names the version it extends",
            session_id=sid,
        )
    if expected is not None and (isinstance(expected, bool) or not isinstance(expected, int)):
        raise ConfigError("expected_version must be an integer", session_id=sid)
    if expected is not None and expected < 0:
        raise ConfigError("expected_version must be >= 0", session_id=sid)
    if commit.session_owner is not None and not isinstance(commit.session_owner, str):
        raise ConfigError("session_owner must be a string or None", session_id=sid)
    token = commit.lease_token
    if token is not None:
        if isinstance(token, bool) or not isinstance(token, int):
            raise ConfigError("lease_token must be an integer or None", session_id=sid)
        if commit.run is None and commit.lease_run_id is None:
            raise ConfigError(
                "a commit with a lease_token names its run (run or lease_run_id)",
                session_id=sid,
            )
        if start:
            raise ConfigError("start_run takes no lease_token (the run is new)", session_id=sid)
    if start and commit.run is None:
        raise ConfigError("start_run needs commit.run", session_id=sid)
    if commit.run is not None and commit.run.session_id != sid:
        raise ConfigError(
            f"run {commit.run.id!r} belongs to session {commit.run.session_id!r}, not {sid!r}",
            session_id=sid,
            run_id=commit.run.id,
        )
    if len(commit.messages) > 1:
        seen: set[str] = set()
        for message in commit.messages:
            if message.id in seen:
                raise duplicate_message(sid, message.id)
            seen.add(message.id)
    if commit.executions:
        keys: set[tuple[str, str]] = set()
        for record in commit.executions:
            if record.session_id != sid:
                raise ConfigError(
                    f"execution record {record.call_id!r} belongs to session "
                    f"{record.session_id!r}, not {sid!r}",
                    session_id=sid,
                    call_id=record.call_id,
                )
            key = (record.run_id, record.call_id)
            if key in keys:
                raise ConfigError(
                    f"execution record {record.call_id!r} appears twice in one commit",
                    session_id=sid,
                    call_id=record.call_id,
                )
            keys.add(key)


def check_execution(stored_digest: str, stored_state: ExecutionState, new: ExecutionRecord) -> None:
    if stored_digest != new.args_digest:
        raise ConflictError(
            f"execution {new.call_id!r} of run {new.run_id!r}: same execution key with "
            "different arguments",
            session_id=new.session_id,
            run_id=new.run_id,
            call_id=new.call_id,
            stored_digest=stored_digest,
            new_digest=new.args_digest,
        )
    if STATE_ORDER[new.state] < STATE_ORDER[stored_state]:
        raise ConflictError(
            f"execution {new.call_id!r} of run {new.run_id!r} cannot move back from "
            f"{stored_state.value} to {new.state.value}",
            session_id=new.session_id,
            run_id=new.run_id,
            call_id=new.call_id,
            stored_state=stored_state.value,
            new_state=new.state.value,
        )


def resolve_lease(
    run_id: str,
    stored_owner: str | None,
    stored_expires_at: float | None,
    new: Run,
    lease_owner: str | None,
    *,
    stored_token: int = 0,
    ended: bool = False,
    lease_token: int | None = None,
) -> Lease | None:
    """The lease a committed run ends up with (fencing first: :func:`check_token`, then
    the owner).

    A commit replaces the stored lease with ``new.lease`` (so ``None`` releases it), except
    that it never moves the expiry of the same owner backwards: a caller holding a ``Run``
    from before its last :meth:`renew_lease` does not undo the renewal. A terminal run
    holds no lease.
    """
    check_token(run_id, stored_token, lease_token, ended=ended, wanted=lease_owner)
    if stored_owner is not None and stored_owner != lease_owner:
        raise lease_lost(run_id, stored_owner, stored_expires_at, wanted=lease_owner)
    lease = new.lease
    if new.status.terminal:
        return None
    if (
        lease is not None
        and stored_owner == lease.owner
        and stored_expires_at is not None
        and lease.expires_at < stored_expires_at
    ):
        return Lease(owner=lease.owner, expires_at=stored_expires_at)
    return lease


def artifact_ref(data: bytes, media_type: str) -> ArtifactRef:
    """Content address: the id hashes the media type and the bytes, so the same bytes with
    the same media type always get the same ref (and are stored once)."""
    if not isinstance(data, bytes | bytearray | memoryview):
        raise ConfigError(f"artifact data must be bytes, got {type(data).__name__}")
    if not isinstance(media_type, str) or not media_type:
        raise ConfigError("artifact media_type must be a non-empty string")
    digest = hashlib.sha256(data).hexdigest()
    key = hashlib.sha256(f"{media_type}\n{digest}".encode()).hexdigest()
    return ArtifactRef(id=f"art_{key[:32]}", sha256=digest, size=len(data), media_type=media_type)


def artifact_ref_of_file(path: str, media_type: str) -> ArtifactRef:
    """:func:`artifact_ref` of a file's bytes, hashed in chunks (never read whole)."""
    if not isinstance(media_type, str) or not media_type:
        raise ConfigError("artifact media_type must be a non-empty string")
    hasher = hashlib.sha256()
    size = 0
    try:
        with open(path, "rb") as file:
            while chunk := file.read(ARTIFACT_CHUNK):
                hasher.update(chunk)
                size += len(chunk)
    except OSError as error:
        raise ConfigError(
            f"cannot read spooled tool output {path!r}: {error}", path=path
        ) from error
    digest = hasher.hexdigest()
    key = hashlib.sha256(f"{media_type}\n{digest}".encode()).hexdigest()
    return ArtifactRef(id=f"art_{key[:32]}", sha256=digest, size=size, media_type=media_type)


ARTIFACT_CHUNK = 1 << 20
"""Bytes copied at a time when a file is put into an artifact store."""


def can_claim(run: Run, owner: str, now: float) -> bool:
    if run.status.terminal:
        return False
    lease = run.lease
    return lease is None or lease.expires_at <= now or lease.owner == owner


def claimed(run: Run, *, owner: str, now: float, expires_at: float) -> Run:
    """The run with its lease taken by ``owner`` and a new lease token (stores that keep
    whole runs: memory, JSONL); LeaseLostError if someone else holds a live lease or the
    run has ended."""
    if not can_claim(run, owner, now):
        raise _lost(run, owner)
    return replace(
        run, lease=Lease(owner=owner, expires_at=expires_at), lease_token=run.lease_token + 1
    )


def renewed(run: Run, *, owner: str, expires_at: float, lease_token: int | None = None) -> Run:
    """The run with ``owner``'s lease extended; LeaseLostError if it is not theirs (or,
    ``lease_token``, no longer that claim's)."""
    check_token(run.id, run.lease_token, lease_token, ended=run.status.terminal, wanted=owner)
    if run.lease is None or run.lease.owner != owner:
        raise _lost(run, owner)
    return replace(run, lease=Lease(owner=owner, expires_at=expires_at))


def stale_runs(runs: Iterable[Run], now: float, status: RunStatus | None = None) -> list[Run]:
    """Non-terminal runs whose lease has expired (or that hold none); ``status``: only
    runs in that status."""
    return [
        r
        for r in runs
        if not r.status.terminal
        and (status is None or r.status is status)
        and (r.lease is None or r.lease.expires_at <= now)
    ]


def leased_runs(runs: Iterable[Run], now: float, status: RunStatus | None = None) -> list[Run]:
    """Non-terminal runs whose lease has not expired at ``now``; ``status``: only runs in
    that status."""
    return [
        r
        for r in runs
        if not r.status.terminal
        and (status is None or r.status is status)
        and r.lease is not None
        and r.lease.expires_at > now
    ]


def _lost(run: Run, owner: str) -> LeaseLostError:
    lease = run.lease
    return lease_lost(
        run.id,
        None if lease is None else lease.owner,
        None if lease is None else lease.expires_at,
        wanted=owner,
    )


# --- the shared in-memory model of one session --------------------------------------------


@record
class Change:
    """What one write does, fully resolved (seqs assigned, leases and flags decided)."""

    messages: tuple[StoredMessage, ...] = ()
    run: Run | None = None
    executions: tuple[ExecutionRecord, ...] = ()
    set_active: bool = False
    active_run_id: str | None = None
    cancel_requested: bool = False


class SessionState:
    """One session with its messages, runs and execution records."""

    __slots__ = ("executions", "message_ids", "messages", "runs", "session")

    def __init__(self, session: Session) -> None:
        self.session = session
        self.messages: list[StoredMessage] = []
        self.message_ids: set[str] = set()
        self.runs: dict[str, Run] = {}
        self.executions: dict[str, dict[str, ExecutionRecord]] = {}

    # planning: every check, no change

    def plan_start(self, commit: Commit) -> Change:
        run = commit.run
        assert run is not None  # validate_commit(start=True) checked it
        self.check_owner(commit.session_owner)
        active = self.session.active_run_id
        if active is not None:
            raise session_busy(self.session.id, active)
        self._check_version(commit.expected_version)
        if run.id in self.runs:
            raise duplicate_run(run.id)
        run = replace(run, cancel_requested=False)
        executions = self._stage_executions(commit.executions, run)
        messages = self._stage_messages(commit.messages)
        return Change(
            messages=messages,
            run=run,
            executions=executions,
            set_active=not run.status.terminal,
            active_run_id=run.id,
        )

    def plan_commit(self, commit: Commit) -> Change:
        self.check_owner(commit.session_owner)
        # Fencing before the version: a writer whose lease was taken over is told so,
        # also when the new holder's messages have put its version behind.
        run = None
        if commit.run is not None:
            stored = self.runs.get(commit.run.id)
            if stored is None:
                raise run_not_found(commit.run.id)
            old = stored.lease
            lease = resolve_lease(
                stored.id,
                None if old is None else old.owner,
                None if old is None else old.expires_at,
                commit.run,
                commit.lease_owner,
                stored_token=stored.lease_token,
                ended=stored.status.terminal,
                lease_token=commit.lease_token,
            )
            run = replace(
                commit.run,
                lease=lease,
                cancel_requested=stored.cancel_requested,
                lease_token=stored.lease_token,
            )
        elif commit.lease_token is not None and commit.lease_run_id is not None:
            fenced = self.runs.get(commit.lease_run_id)
            check_token(
                commit.lease_run_id,
                None if fenced is None else fenced.lease_token,
                commit.lease_token,
                ended=fenced is not None and fenced.status.terminal,
                wanted=commit.lease_owner,
            )
        self._check_version(commit.expected_version)
        executions = self._stage_executions(commit.executions, run)
        messages = self._stage_messages(commit.messages)
        active = self.session.active_run_id
        if run is not None:
            cancel = run.cancel_requested
        else:
            current = None if active is None else self.runs.get(active)
            cancel = current is not None and current.cancel_requested
        return Change(
            messages=messages,
            run=run,
            executions=executions,
            set_active=run is not None and run.status.terminal and active == run.id,
            active_run_id=None,
            cancel_requested=cancel,
        )

    def check_owner(self, owner: str | None) -> None:
        """Someone else's session is refused as if it did not exist."""
        if owner is not None and self.session.owner != owner:
            raise session_not_found(self.session.id)

    def _check_version(self, expected: int | None) -> None:
        actual = self.session.version
        if expected is not None and expected != actual:
            raise version_conflict(self.session.id, expected, actual)

    def _stage_messages(self, messages: tuple[Message, ...]) -> tuple[StoredMessage, ...]:
        ids = self.message_ids
        for message in messages:
            if message.id in ids:
                raise duplicate_message(self.session.id, message.id)
        base = self.session.version + 1
        return tuple(StoredMessage(base + i, message) for i, message in enumerate(messages))

    def _stage_executions(
        self, records: tuple[ExecutionRecord, ...], run: Run | None
    ) -> tuple[ExecutionRecord, ...]:
        for rec in records:
            stored = self.executions.get(rec.run_id, {}).get(rec.call_id)
            if stored is not None:
                check_execution(stored.args_digest, stored.state, rec)
            elif rec.run_id not in self.runs and (run is None or run.id != rec.run_id):
                raise run_not_found(rec.run_id)
        return records

    # applying

    def apply(self, change: Change) -> None:
        if change.messages:
            self.messages.extend(change.messages)
            self.message_ids.update(sm.message.id for sm in change.messages)
        if change.run is not None:
            self.runs[change.run.id] = change.run
        for rec in change.executions:
            self.executions.setdefault(rec.run_id, {})[rec.call_id] = rec
        if change.messages or change.set_active:
            self.session = replace(
                self.session,
                version=change.messages[-1].seq if change.messages else self.session.version,
                active_run_id=change.active_run_id
                if change.set_active
                else self.session.active_run_id,
            )

    def result(self, change: Change) -> CommitResult:
        return CommitResult(self.session.version, change.cancel_requested)

    # reading

    def read(self, after: int, limit: int | None) -> list[StoredMessage]:
        start = max(after, 0)
        end = None if limit is None else start + limit
        return self.messages[start:end]

    def execution_list(self, run_id: str) -> list[ExecutionRecord]:
        return list(self.executions.get(run_id, {}).values())
