"""Git workspace snapshots for forks (``plait sessions fork --snapshot``).

A snapshot is a commit of the working tree as it is at fork time (tracked files with their
uncommitted changes, and untracked files that git does not ignore) built through a
temporary index file, so the user's index, branches and ``HEAD`` are untouched. It is kept
on a private ref ``refs/plait/snapshots/<branch>-<random>`` and checked out (detached) as a
separate worktree under plait's data directory; the branch is bound to that worktree. What it
does not cover is stated in :data:`plait.domain.forks.SNAPSHOT_NOT_COVERED`.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING

from plait.domain.errors import ConfigError, PlaitError

if TYPE_CHECKING:
    from plait.domain.forks import WorkspaceSnapshot

__all__ = ["GitSnapshots", "SnapshotError"]

_IDENTITY = {
    "GIT_AUTHOR_NAME": "plait",
    "GIT_AUTHOR_EMAIL": "plait@localhost",
    "GIT_COMMITTER_NAME": "plait",
    "GIT_COMMITTER_EMAIL": "plait@localhost",
}


class SnapshotError(PlaitError):
    code = "snapshot_failed"


class GitSnapshots:
    """:class:`~plait.application.ports.WorkspaceSnapshots` with the ``git`` command."""

    def __init__(self, worktrees_dir: str | Path) -> None:
        """``worktrees_dir``: where snapshots' worktrees go, never inside a workspace
        (:attr:`plait.settings.Settings.worktrees_dir`)."""
        self._dir = Path(worktrees_dir)

    def take(self, workspace: str, *, name: str, message: str) -> WorkspaceSnapshot:
        ws = Path(workspace).resolve()
        if not ws.is_dir():
            raise ConfigError(f"workspace {workspace!r} is not an existing directory")
        try:
            top = Path(_git(ws, "rev-parse", "--show-toplevel"))
        except SnapshotError:
            raise ConfigError(
                f"workspace {str(ws)!r} is not inside a git work tree, so --snapshot cannot "
                "record it; fork without --snapshot (the branch then uses the workspace as "
                "it is now) or run `git init` there first",
                workspace=str(ws),
            ) from None
        import tempfile  # lazy: tempfile, shutil (~3 ms), at the first snapshot

        with tempfile.TemporaryDirectory(prefix="plait-snapshot-") as tmp:
            env = {"GIT_INDEX_FILE": str(Path(tmp) / "index"), **_IDENTITY}
            _git(top, "add", "--all", "--", ".", env=env)
            tree = _git(top, "write-tree", env=env)
            head = _git(top, "rev-parse", "--verify", "--quiet", "HEAD^{commit}", check=False)
            parents = ["-p", head] if head else []
            commit = _git(top, "commit-tree", tree, *parents, "-m", message, env=env)
        # Unique per attempt: two racing retries of one fork, or a retry after a crash
        # that left an attempt behind, never share (or delete) each other's ref and worktree.
        unique = f"{name}-{os.urandom(4).hex()}"
        ref = f"refs/plait/snapshots/{unique}"
        _git(top, "update-ref", ref, commit)
        root = self._dir / unique
        root.parent.mkdir(parents=True, exist_ok=True)
        try:
            _git(
                top,
                "-c",
                "core.hooksPath=/dev/null",
                "worktree",
                "add",
                "--detach",
                "--quiet",
                str(root),
                commit,
            )
        except BaseException:
            _git(top, "update-ref", "-d", ref, check=False)
            raise
        # lazy: the forks' domain module, only when a fork takes a snapshot
        from plait.domain.forks import WorkspaceSnapshot

        return WorkspaceSnapshot(
            source_workspace=str(ws),
            repository=str(top),
            ref=ref,
            commit=commit,
            worktree=str(root / ws.relative_to(top)),
        )

    def discard(self, snapshot: WorkspaceSnapshot) -> None:
        repo = Path(snapshot.repository)
        root = _git(Path(snapshot.worktree), "rev-parse", "--show-toplevel", check=False)
        if root:
            _git(repo, "worktree", "remove", "--force", root, check=False)
        _git(repo, "update-ref", "-d", snapshot.ref, check=False)


def _git(cwd: Path, *args: str, env: dict[str, str] | None = None, check: bool = True) -> str:
    try:
        out = subprocess.run(
            ["git", *args],
            cwd=cwd,
            env={**os.environ, **(env or {})},  # git's own environment, passed through
            capture_output=True,
            text=True,
            check=False,
            timeout=120,
        )
    except FileNotFoundError:
        if not check:
            return ""
        raise ConfigError("--snapshot needs the `git` command, which is not installed") from None
    except (OSError, subprocess.TimeoutExpired) as exc:
        if not check:
            return ""
        raise SnapshotError(f"git {args[0]} failed in {cwd}: {exc}", cwd=str(cwd)) from exc
    if out.returncode != 0:
        if not check:
            return ""
        raise SnapshotError(
            f"git {' '.join(args[:2])} failed in {cwd}: {out.stderr.strip()}",
            cwd=str(cwd),
            status=out.returncode,
        )
    return out.stdout.strip()
