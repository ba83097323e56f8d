"""Git repositories in a workspace: code the host runs later.

A repository's ``config`` (``core.fsmonitor``, ``core.pager``, filters, aliases, ...) and
``hooks/`` run commands when the user's own ``git`` later works in the workspace, outside
any sandbox. So by default nothing a tool does may create or change a git directory,
nested ones included:

- a *git place* is an entry named ``.git`` (a directory, a ``gitdir:`` file or a link), or
  a directory git would take as a repository by itself (a bare repository: it holds
  ``HEAD`` and ``objects`` or ``commondir``);
- the file tools refuse to write into a git place or to make one (:func:`git_write`);
- ``run_command`` binds the git places that exist read-only (:func:`scan_git`), and
  undoes any a command made anyway (:func:`undo_new_git`): a new ``.git`` is removed, a
  new bare repository loses its ``HEAD`` (which makes it no repository).
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import stat
from collections.abc import Iterator

from plait.domain.errors import PolicyError
from plait.domain.record import record

__all__ = [
    "GitPlaces",
    "GitScan",
    "denied",
    "git_write",
    "scan_git",
    "undo_new_git",
]

GitPlaces = dict[str, tuple[int, int]]
"""Workspace-relative path of each git place → its (device, inode)."""

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_REPO_MARKS = ("objects", "commondir")
_REASON = (
    "git repositories' config and hooks run code on the host when git is used there later, "
    "so tools may not create or change them (the policy's protect_git = false allows it)"
)


def _has(dir_fd: int, name: str) -> bool:
    try:
        os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except OSError:
        return False
    return True


def _repo_shaped(dir_fd: int, adding: str | None = None) -> bool:
    """Whether git would take the directory as a repository (once ``adding`` exists)."""

    def has(name: str) -> bool:
        return name == adding or _has(dir_fd, name)

    return has("HEAD") and any(has(m) for m in _REPO_MARKS)


def git_write(dir_fd: int, name: str) -> bool:
    """Whether writing (or creating) the entry ``name`` in the directory ``dir_fd`` is
    inside, or makes, a git place. The file tools call it for every directory a write
    passes through, with the next component, and for the final one."""
    return name == ".git" or _repo_shaped(dir_fd, adding=name)


def denied(display: str) -> PolicyError:
    return PolicyError(f"writing {display!r} is denied: {_REASON}", path=display)


@record
class GitScan:
    """The git places under a root, and what each directory looked like when it was
    listed: ``(device, inode, ctime in ns, names of its subdirectories)``."""

    places: GitPlaces
    dirs: dict[str, tuple[int, int, int, tuple[str, ...]]]


def scan_git(root: str, *, since: GitScan | None = None) -> GitScan:
    """Every git place under ``root`` (a real directory path; ``.`` when the root itself is
    a bare repository), without following links and without entering the places found.

    With ``since``, a directory whose inode and ctime are what ``since`` saw is not listed
    again: creating, removing or renaming an entry in a directory changes its ctime, which
    no process can set back, so its entries (its ``.git``, whether it is a repository, its
    subdirectories) are still the ones ``since`` found. Only valid when every change to
    look for came later than the kernel's clock tick after ``since`` was taken.
    """
    places: GitPlaces = {}
    dirs: dict[str, tuple[int, int, int, tuple[str, ...]]] = {}
    try:
        top = os.open(root, _DIR_FLAGS)
    except OSError:
        return GitScan(places, dirs)
    # Depth first, one open directory per level: a wide tree never holds many fds.
    stack: list[tuple[int, str, Iterator[str]]] = []
    try:
        stack.append((top, "", iter(_scan_dir(top, "", since, places, dirs))))
    except OSError:
        os.close(top)
        return GitScan(places, dirs)
    while stack:
        fd, rel, names = stack[-1]
        name = next(names, None)
        if name is None:
            os.close(fd)
            stack.pop()
            continue
        path = f"{rel}/{name}" if rel else name
        try:
            child = os.open(name, _DIR_FLAGS, dir_fd=fd)
        except OSError:
            continue
        try:
            stack.append((child, path, iter(_scan_dir(child, path, since, places, dirs))))
        except OSError:
            os.close(child)
    return GitScan(places, dirs)


def _scan_dir(
    fd: int,
    rel: str,
    since: GitScan | None,
    places: GitPlaces,
    dirs: dict[str, tuple[int, int, int, tuple[str, ...]]],
) -> tuple[str, ...]:
    """Record the git places directly in the directory ``fd``; its subdirectories to
    enter."""
    st = os.fstat(fd)
    here = rel or "."
    dot_git = f"{rel}/.git" if rel else ".git"
    seen = since.dirs.get(rel) if since is not None else None
    if (
        since is not None
        and seen is not None
        and seen[:3] == (st.st_dev, st.st_ino, st.st_ctime_ns)
    ):
        for name in (here, dot_git):
            if name in since.places:
                places[name] = since.places[name]
        dirs[rel] = seen
        return () if rel and here in places else seen[3]
    if _repo_shaped(fd):
        places[here] = (st.st_dev, st.st_ino)
        if rel:
            dirs[rel] = (st.st_dev, st.st_ino, st.st_ctime_ns, ())
            return ()
    subdirs: list[str] = []
    with os.scandir(fd) as entries:
        for entry in entries:
            if entry.name == ".git":
                with contextlib.suppress(OSError):
                    lst = entry.stat(follow_symlinks=False)
                    path = f"{rel}/.git" if rel else ".git"
                    places[path] = (lst.st_dev, lst.st_ino)
                continue
            with contextlib.suppress(OSError):
                if entry.is_dir(follow_symlinks=False):
                    subdirs.append(entry.name)
    dirs[rel] = (st.st_dev, st.st_ino, st.st_ctime_ns, tuple(subdirs))
    return dirs[rel][3]


def _open_parent(root: str, rel: str) -> tuple[int, str] | None:
    """An fd of the directory holding ``rel`` (walked with O_NOFOLLOW from ``root``) and
    the entry's name; None when the way there is gone or no longer a directory."""
    *dirs, name = [p for p in rel.split("/") if p != "."]
    try:
        fd = os.open(root, _DIR_FLAGS)
    except OSError:
        return None
    for part in dirs:
        try:
            nxt = os.open(part, _DIR_FLAGS, dir_fd=fd)
        except OSError:
            os.close(fd)
            return None
        os.close(fd)
        fd = nxt
    return fd, name


def _remove(parent_fd: int, name: str) -> None:
    st = os.stat(name, dir_fd=parent_fd, follow_symlinks=False)
    if stat.S_ISDIR(st.st_mode):
        shutil.rmtree(name, dir_fd=parent_fd)
    else:
        os.unlink(name, dir_fd=parent_fd)


def undo_new_git(root: str, before: GitScan, *, incremental: bool = False) -> list[str]:
    """Remove what makes each git place that was not in ``before`` (or is another object
    now) a repository; the workspace-relative paths undone. ``incremental``: lists only
    the directories that changed since ``before`` (see :func:`scan_git`)."""
    undone: list[str] = []
    now = scan_git(root, since=before if incremental else None)
    for rel, ident in sorted(now.places.items()):
        if before.places.get(rel) == ident:
            continue
        is_dot_git = rel.rsplit("/", 1)[-1] == ".git"
        opened = _open_parent(root, rel if is_dot_git else f"{rel}/HEAD")
        if opened is None:
            continue
        fd, name = opened
        try:
            _remove(fd, name)
            undone.append(rel)
        except OSError as exc:
            if exc.errno != errno.ENOENT:
                raise
        finally:
            os.close(fd)
    return undone
