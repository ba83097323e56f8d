"""Places the file tools must never touch: plait's own store and its artifacts.

The store may lie inside a workspace (``sqlite:///agent.db`` in the project directory, an
old ``.plait/`` store); a model that overwrites it destroys the very record of what it did.
Protected paths are matched by identity, not by spelling: a directory entry ``(device,
inode of its directory, name)`` — which also covers files not created yet, such as
SQLite's ``-wal`` — and the ``(device, inode)`` of what exists, which also catches hard
links and symbolic links that lead there. A blocked access is a
:class:`~plait.domain.errors.PolicyError`, which the run records as ``denied``.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable

from plait.domain.errors import PolicyError

__all__ = ["Guard"]

_REASON = "it is part of plait's own store, which the tools may not read or change"


class Guard:
    """The identities of the protected paths, taken when the guard is built (build one
    per tool call: files such as a SQLite ``-wal`` come and go), plus those of ``known``
    (a guard built when the tools were made): a directory keeps its inode when it is
    renamed, so ``mv data data2`` in a command cannot make ``data2/plait.db`` writable."""

    def __init__(
        self, paths: Iterable[str | os.PathLike[str]] = (), *, known: Guard | None = None
    ) -> None:
        self._entries: set[tuple[int, int, str]] = set(known._entries) if known else set()
        self._inodes: set[tuple[int, int]] = set(known._inodes) if known else set()
        for path in paths:
            absolute = os.path.abspath(os.fspath(path))
            parent, name = os.path.split(absolute)
            with contextlib.suppress(OSError):
                st = os.stat(parent)
                self._entries.add((st.st_dev, st.st_ino, name))
            with contextlib.suppress(OSError):
                st = os.stat(absolute)
                self._inodes.add((st.st_dev, st.st_ino))

    def __bool__(self) -> bool:
        return bool(self._entries or self._inodes)

    def blocks(self, parent_fd: int | None, name: str | None, st: os.stat_result | None) -> bool:
        """Whether the entry ``name`` in the directory ``parent_fd`` (``st``: what it is,
        None when it does not exist) is protected."""
        if not self:
            return False
        if st is not None and (st.st_dev, st.st_ino) in self._inodes:
            return True
        if parent_fd is None or name is None:
            return False
        parent = os.fstat(parent_fd)
        return (parent.st_dev, parent.st_ino, name) in self._entries

    def hides(self, parent_fd: int, name: str) -> bool:
        """Whether a directory entry met while walking a tree is protected."""
        if not self:
            return False
        try:
            st: os.stat_result | None = os.stat(name, dir_fd=parent_fd, follow_symlinks=False)
        except OSError:
            st = None
        return self.blocks(parent_fd, name, st)

    @staticmethod
    def denied(display: str) -> PolicyError:
        return PolicyError(f"access to {display!r} is denied: {_REASON}", path=display)

    @staticmethod
    def note(hidden: int) -> str:
        what = "1 entry" if hidden == 1 else f"{hidden} entries"
        return f"{what} not shown: {_REASON}"
