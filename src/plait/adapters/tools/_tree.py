"""Walking a directory tree through directory fds, never following links."""

from __future__ import annotations

import errno
import os
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from typing import Literal

from plait.adapters.tools._paths import _DIR_FLAGS
from plait.domain.record import record

__all__ = ["EntryKind", "TreeEntry", "WalkNotes", "walk_tree"]


EntryKind = Literal["dir", "file", "link", "other"]


@record
class TreeEntry:
    """One directory entry met by :func:`walk_tree`; ``parent_fd`` stays open (and valid)
    until the walk moves on."""

    rel: str
    name: str
    kind: EntryKind
    parent_fd: int


@dataclass(slots=True)
class WalkNotes:
    """Where a walk could not see everything."""

    truncated_dirs: list[str] = field(default_factory=list)
    too_deep: list[str] = field(default_factory=list)
    unreadable: list[str] = field(default_factory=list)

    def describe(self) -> list[str]:
        out: list[str] = []
        if self.truncated_dirs:
            out.append(f"too many entries, only some read in: {', '.join(self.truncated_dirs)}")
        if self.too_deep:
            out.append(f"nested too deep, not entered: {', '.join(self.too_deep[:10])}")
        if self.unreadable:
            out.append(f"could not be read: {', '.join(self.unreadable[:10])}")
        return out


def _kind(entry: os.DirEntry[str]) -> EntryKind:
    try:
        if entry.is_symlink():
            return "link"
        if entry.is_dir(follow_symlinks=False):
            return "dir"
        if entry.is_file(follow_symlinks=False):
            return "file"
    except OSError:
        pass
    return "other"


def _read_dir(fd: int, cap: int) -> tuple[list[tuple[str, EntryKind]], bool]:
    entries: list[tuple[str, EntryKind]] = []
    with os.scandir(fd) as it:
        for entry in it:
            if len(entries) >= cap:
                return sorted(entries), True
            entries.append((entry.name, _kind(entry)))
    return sorted(entries), False


def walk_tree(
    fd: int,
    prefix: str,
    *,
    descend: Callable[[TreeEntry], bool],
    notes: WalkNotes,
    max_depth: int,
    max_dir_entries: int,
    _depth: int = 0,
) -> Generator[TreeEntry, None, None]:
    """Entries under the directory ``fd`` in sorted depth-first order.

    Descends into real directories for which ``descend`` is true, never into links. At
    most ``max_depth`` levels deep (bounding the open fds) and ``max_dir_entries`` names
    read per directory; what was cut is recorded in ``notes``. Close the iterator (e.g.
    with :func:`contextlib.closing`) when stopping early so its fds are released.
    """
    try:
        entries, truncated = _read_dir(fd, max_dir_entries)
    except OSError:
        if _depth == 0:
            raise
        notes.unreadable.append(prefix.rstrip("/"))
        return
    if truncated:
        notes.truncated_dirs.append(prefix or ".")
    for name, kind in entries:
        entry = TreeEntry(rel=prefix + name, name=name, kind=kind, parent_fd=fd)
        yield entry
        if kind != "dir" or not descend(entry):
            continue
        if _depth + 1 >= max_depth:
            notes.too_deep.append(entry.rel)
            continue
        try:
            child = os.open(name, _DIR_FLAGS, dir_fd=fd)
        except OSError as exc:
            if exc.errno in (errno.EACCES, errno.EPERM):
                notes.unreadable.append(entry.rel)
            continue  # else vanished, or replaced by a link since it was listed: skip it
        try:
            yield from walk_tree(
                child,
                entry.rel + "/",
                descend=descend,
                notes=notes,
                max_depth=max_depth,
                max_dir_entries=max_dir_entries,
                _depth=_depth + 1,
            )
        finally:
            os.close(child)
