"""What a fork records: the request that made a branch, and an optional workspace
snapshot with its stated coverage (docs/design.md#forks)."""

from __future__ import annotations

import hashlib

from plait.domain.record import record

__all__ = ["SNAPSHOT_NOT_COVERED", "ForkRecord", "WorkspaceSnapshot", "branch_id_for"]

SNAPSHOT_NOT_COVERED = (
    "files ignored by git (.gitignore, .git/info/exclude) and empty directories",
    "the git index, stashes and other refs of the repository",
    "databases, caches and any state outside the work tree",
    "external services and remote systems",
)
"""What a git snapshot of a workspace does not capture; shown wherever one is reported."""


@record(kw_only=True)
class WorkspaceSnapshot:
    """A commit of a git workspace's working tree (tracked and untracked, not ignored
    files) on a private ref, checked out as a separate worktree the branch is bound to."""

    source_workspace: str
    repository: str
    ref: str
    commit: str
    worktree: str
    not_covered: tuple[str, ...] = SNAPSHOT_NOT_COVERED


@record(kw_only=True)
class ForkRecord:
    """The request that created a branch, kept with it so a retry of the same request
    finds the same branch, and a different request under the same id is refused.

    ``through_seq`` and ``source_version`` fix the prefix: the branch holds the source's
    messages ``1..through_seq``, read when the source was at ``source_version``.
    """

    branch_session_id: str
    request_id: str
    caller: str | None
    source_session_id: str
    through_message_id: str
    through_seq: int
    source_version: int
    created_at: float
    snapshot_requested: bool = False
    snapshot: WorkspaceSnapshot | None = None

    def same_request(
        self, source_session_id: str, through_message_id: str, snapshot_requested: bool
    ) -> bool:
        return (
            self.source_session_id == source_session_id
            and self.through_message_id == through_message_id
            and self.snapshot_requested == snapshot_requested
        )


def branch_id_for(caller: str | None, request_id: str) -> str:
    """The branch's session id, derived from who asked and their request id: a retried
    request names the same branch, so every store deduplicates it by the session's key
    in the same transaction that creates it."""
    who = "" if caller is None else f"u:{caller}"
    digest = hashlib.sha256(f"plait-fork\0{who}\0{request_id}".encode()).hexdigest()
    return f"ses_{digest[:24]}"
