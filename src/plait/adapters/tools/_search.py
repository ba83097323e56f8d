"""``search_text``: a bounded search through the workspace's text files.

Bounded in bytes, entries and matches, and in time: the search asks its
:class:`~plait.adapters.tools._deadline.Deadline` before every block of lines and every
file, and stops (with what it found so far) once its time limit passed or its caller gave
up. Lines are matched by :mod:`plait.adapters.tools._match` (regular expressions on RE2,
which cannot backtrack), a block of lines at once, line by line only where a block may
hold a match.
"""

from __future__ import annotations

import fnmatch
import os
from contextlib import closing
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from plait.adapters.tools._deadline import Deadline
from plait.adapters.tools._guard import Guard
from plait.adapters.tools._limits import CHUNK, WorkspaceLimits, plural
from plait.adapters.tools._match import Matcher, matcher
from plait.adapters.tools._paths import Workspace, is_binary, open_child_file
from plait.adapters.tools._tree import TreeEntry, WalkNotes, walk_tree
from plait.domain.errors import ToolError

if TYPE_CHECKING:  # the typed model imports pydantic: see _catalog.parse
    from plait.adapters.tools._specs import SearchText

__all__ = ["search_text"]

_SHOWN_LINE = 300  # characters of a matching line shown
_BATCH = 32 * 1024
"""Bytes of lines matched as one block (plus at most one more read of CHUNK bytes): small
enough that one block takes RE2 a few seconds at worst, big enough that the per-call cost
vanishes."""


@dataclass(slots=True)
class _Lines:
    """Where a file's search is: the number of the line the last piece belongs to."""

    rel: str
    number: int = 0
    at_start: bool = True  # the next piece starts a new line
    reported: int = 0  # the last line reported (a long line is read in several pieces)


@dataclass(slots=True)
class _Search:
    matcher: Matcher
    max_results: int
    limits: WorkspaceLimits
    deadline: Deadline
    found: list[str] = field(default_factory=list)
    notes: WalkNotes = field(default_factory=WalkNotes)
    hidden: set[str] = field(default_factory=set)
    scanned: int = 0
    binary: int = 0
    full: bool = False
    scan_exhausted: bool = False
    out_of_time: bool = False
    walked_all: bool = True

    def file(self, fd: int, rel: str) -> None:
        if is_binary(fd):
            self.binary += 1
            return
        lines = _Lines(rel)
        batch: list[bytes] = []
        size = 0
        with open(fd, "rb", buffering=CHUNK, closefd=False) as handle:
            while piece := handle.readline(CHUNK):
                self.scanned += len(piece)
                if self.scanned > self.limits.max_scan_bytes:
                    self.scan_exhausted = True
                    break
                batch.append(piece)
                size += len(piece)
                if size >= _BATCH:
                    self.block(lines, batch)
                    if self.done:
                        return
                    batch, size = [], 0
        if batch:
            self.block(lines, batch)

    def block(self, lines: _Lines, batch: list[bytes]) -> None:
        """Match the next pieces of the file: the block at once, then, only if it may
        hold a match, line by line."""
        if self.deadline.passed():
            self.out_of_time = True
            return
        data = b"".join(batch)
        breaks = data.count(b"\n")
        whole = breaks == len(batch) or (breaks == len(batch) - 1 and not batch[-1].endswith(b"\n"))
        if not self.matcher.block(data, whole and lines.at_start):
            lines.number += lines.at_start + breaks - data.endswith(b"\n")
            lines.at_start = data.endswith(b"\n")
            return
        for piece in batch:
            lines.number += lines.at_start
            lines.at_start = piece.endswith(b"\n")
            if lines.number == lines.reported:
                continue
            if self.deadline.passed():
                self.out_of_time = True
                return
            if not self.matcher.line(piece):
                continue
            lines.reported = lines.number
            text = piece.decode("utf-8", "replace").rstrip("\r\n")
            if len(text) > _SHOWN_LINE:
                text = text[:_SHOWN_LINE] + "…"
            self.found.append(f"{lines.rel}:{lines.number}: {text}")
            if len(self.found) >= self.max_results:
                self.full = True
                return

    @property
    def done(self) -> bool:
        return self.full or self.scan_exhausted or self.out_of_time

    def tree(self, ws: Workspace, fd: int, prefix: str, glob: str | None) -> None:
        lim = self.limits
        walk = walk_tree(
            fd,
            prefix,
            descend=lambda entry: entry.name != ".git" and entry.rel not in self.hidden,
            notes=self.notes,
            max_depth=lim.max_depth,
            max_dir_entries=lim.max_dir_entries,
        )
        with closing(walk):
            for count, entry in enumerate(walk):
                if count >= lim.max_walk_entries:
                    self.walked_all = False
                    return
                if self.deadline.passed():
                    self.out_of_time = True
                    return
                if ws.guard.hides(entry.parent_fd, entry.name):
                    self.hidden.add(entry.rel)
                    continue
                if entry.kind != "file" or entry.name == ".git" or not _glob_matches(glob, entry):
                    continue
                opened = open_child_file(entry.parent_fd, entry.name)
                if opened is None:
                    continue
                try:
                    self.file(opened[0], entry.rel)
                finally:
                    os.close(opened[0])
                if self.done:
                    return

    def tail(self) -> list[str]:
        lim = self.limits
        tail: list[str] = []
        if self.full:
            tail.append(f"stopped after {self.max_results} matches; narrow the search for more")
        if self.scan_exhausted:
            tail.append(f"stopped after searching {lim.max_scan_bytes} bytes")
        if self.out_of_time:
            tail.append(self.deadline.reason("search_text") + "; narrow the search")
        if not self.walked_all:
            tail.append(f"stopped after {lim.max_walk_entries} directory entries")
        if self.binary:
            tail.append(f"skipped {plural(self.binary, 'binary file')}")
        tail += self.notes.describe()
        if self.hidden:
            tail.append(Guard.note(len(self.hidden)))
        return tail


def _glob_matches(glob: str | None, entry: TreeEntry) -> bool:
    if glob is None:
        return True
    return fnmatch.fnmatchcase(entry.rel if "/" in glob else entry.name, glob)


def search_text(
    ws: Workspace, args: SearchText, limits: WorkspaceLimits, deadline: Deadline
) -> str:
    pattern, path, glob = args.pattern, args.path, args.glob
    if args.max_results > limits.max_search_matches:  # the configured limit may be lower
        raise ToolError(
            f"max_results may be at most {limits.max_search_matches} here",
            argument="max_results",
        )
    search = _Search(
        matcher=matcher(pattern, regex=args.regex, ignore_case=args.ignore_case),
        max_results=args.max_results,
        limits=limits,
        deadline=deadline,
    )
    with ws.open(path) as entry:
        if entry.fd is None:
            raise ToolError(f"{path!r} does not exist", path=path)
        rel = ws.relative(path)
        if entry.is_dir:
            search.tree(ws, entry.fd, rel + "/" if rel else "", glob)
        else:
            search.file(entry.fd, rel)
    body = "\n".join(search.found) if search.found else f"no matches for {pattern!r}"
    return body + "".join(f"\n[{t}]" for t in search.tail())
