"""Fork support shared by the stores: the prefix rules on the in-memory session model
(memory and JSONL stores) and the codec of :class:`~plait.domain.forks.ForkRecord`."""

from __future__ import annotations

from dataclasses import replace
from typing import Any, NoReturn

from plait.adapters.stores.shared.state import SessionState, check_new_session, duplicate_session
from plait.application.ports import ForkCommit
from plait.domain.errors import ConfigError, MessageNotFoundError
from plait.domain.forks import ForkRecord, WorkspaceSnapshot

__all__ = [
    "RECORD_VERSION",
    "check_fork_commit",
    "fork_state",
    "missing_point",
    "prefix_seq",
    "record_from_dict",
    "record_to_dict",
    "reject_plain_session",
]

RECORD_VERSION = 1


def prefix_seq(state: SessionState, message_id: str) -> int | None:
    if message_id not in state.message_ids:
        return None
    for sm in reversed(state.messages):
        if sm.message.id == message_id:
            return sm.seq
    return None  # pragma: no cover - message_ids and messages always agree


def check_fork_commit(commit: ForkCommit) -> None:
    """Misuse checks that need no stored state."""
    branch, record = commit.branch, commit.record
    check_new_session(branch)
    origin = branch.fork_origin
    if (
        branch.id != record.branch_session_id
        or origin is None
        or origin.parent_session_id != record.source_session_id
        or origin.fork_point_message_id != record.through_message_id
        or record.through_seq < 1
    ):
        raise ConfigError(
            f"fork of {branch.id!r}: the branch's origin and the fork record disagree",
            session_id=branch.id,
        )


def missing_point(commit: ForkCommit) -> MessageNotFoundError:
    record = commit.record
    return MessageNotFoundError(
        f"session {record.source_session_id!r} holds no message {record.through_message_id!r} at "
        f"#{record.through_seq}",
        session_id=record.source_session_id,
        message_id=record.through_message_id,
    )


def reject_plain_session(session_id: str) -> NoReturn:
    raise duplicate_session(session_id)


def fork_state(source: SessionState, commit: ForkCommit) -> SessionState:
    """The branch's state: the source's first ``through_seq`` messages, shared (the
    message values are immutable), no runs, no execution records."""
    check_fork_commit(commit)
    seq = commit.record.through_seq
    messages = source.messages
    if len(messages) < seq or messages[seq - 1].message.id != commit.record.through_message_id:
        raise missing_point(commit)
    state = SessionState(replace(commit.branch, version=seq))
    state.messages = messages[:seq]
    state.message_ids = {sm.message.id for sm in state.messages}
    return state


def record_to_dict(record: ForkRecord) -> dict[str, Any]:
    snap = record.snapshot
    return {
        "schema_version": RECORD_VERSION,
        "branch_session_id": record.branch_session_id,
        "request_id": record.request_id,
        "caller": record.caller,
        "source_session_id": record.source_session_id,
        "through_message_id": record.through_message_id,
        "through_seq": record.through_seq,
        "source_version": record.source_version,
        "created_at": record.created_at,
        "snapshot_requested": record.snapshot_requested,
        "snapshot": None
        if snap is None
        else {
            "source_workspace": snap.source_workspace,
            "repository": snap.repository,
            "ref": snap.ref,
            "commit": snap.commit,
            "worktree": snap.worktree,
            "not_covered": list(snap.not_covered),
        },
    }


def record_from_dict(data: dict[str, Any]) -> ForkRecord:
    """Raises KeyError/TypeError/ValueError on a bad shape (the caller names the file)."""
    if data.get("schema_version") != RECORD_VERSION:
        raise ValueError(f"unknown fork record schema_version {data.get('schema_version')!r}")
    snapshot_data = data["snapshot"]
    return ForkRecord(
        branch_session_id=data["branch_session_id"],
        request_id=data["request_id"],
        caller=data["caller"],
        source_session_id=data["source_session_id"],
        through_message_id=data["through_message_id"],
        through_seq=int(data["through_seq"]),
        source_version=int(data["source_version"]),
        created_at=float(data["created_at"]),
        snapshot_requested=bool(data["snapshot_requested"]),
        snapshot=None
        if snapshot_data is None
        else WorkspaceSnapshot(
            source_workspace=snapshot_data["source_workspace"],
            repository=snapshot_data["repository"],
            ref=snapshot_data["ref"],
            commit=snapshot_data["commit"],
            worktree=snapshot_data["worktree"],
            not_covered=tuple(snapshot_data["not_covered"]),
        ),
    )
