"""``search_text``: a bounded search through the workspace's text files."""

from __future__ import annotations

import fnmatch
import os
import re
from collections.abc import Callable
from contextlib import closing
from dataclasses import dataclass
from typing import Any

from plait.adapters.tools._guard import Guard
from plait.adapters.tools._limits import (
    CHUNK,
    WorkspaceLimits,
    arg,
    bool_arg,
    int_arg,
    plural,
    str_arg,
)
from plait.adapters.tools._paths import (
    Workspace,
    is_binary,
    open_child_file,
)
from plait.adapters.tools._tree import TreeEntry, WalkNotes, walk_tree
from plait.domain.errors import ToolError

__all__ = ["search_text"]

_SHOWN_LINE = 300  # characters of a matching line shown


@dataclass(slots=True)
class _Search:
    matches: Callable[[str], bool]
    max_results: int
    max_scan: int
    found: list[str]
    scanned: int = 0
    binary: int = 0
    full: bool = False
    scan_exhausted: bool = False

    def file(self, fd: int, rel: str) -> None:
        if is_binary(fd):
            self.binary += 1
            return
        with open(fd, "rb", buffering=CHUNK, closefd=False) as f:
            line = 0
            at_start = True
            reported = 0
            while piece := f.readline(CHUNK):
                self.scanned += len(piece)
                if self.scanned > self.max_scan:
                    self.scan_exhausted = True
                    return
                line += at_start
                at_start = piece.endswith(b"\n")
                if line == reported:
                    continue
                text = piece.decode("utf-8", "replace").rstrip("\r\n")
                if self.matches(text):
                    reported = line
                    if len(text) > _SHOWN_LINE:
                        text = text[:_SHOWN_LINE] + "…"
                    self.found.append(f"{rel}:{line}: {text}")
                    if len(self.found) >= self.max_results:
                        self.full = True
                        return

    @property
    def done(self) -> bool:
        return self.full or self.scan_exhausted


def _matcher(pattern: str, regex: bool, ignore_case: bool) -> Callable[[str], bool]:
    if regex:
        try:
            compiled = re.compile(pattern, re.IGNORECASE if ignore_case else 0)
        except re.error as e:
            raise ToolError(f"invalid regular expression: {e}", pattern=pattern) from e
        return lambda text: compiled.search(text) is not None
    if ignore_case:
        folded = pattern.casefold()
        return lambda text: folded in text.casefold()
    return lambda text: pattern in text


def _glob_matches(glob: str | None, e: TreeEntry) -> bool:
    if glob is None:
        return True
    return fnmatch.fnmatchcase(e.rel if "/" in glob else e.name, glob)


def search_text(ws: Workspace, args: dict[str, Any], limits: WorkspaceLimits) -> str:
    pattern = str_arg(args, "pattern")
    if not pattern:
        raise ToolError("pattern must not be empty")
    path = str_arg(args, "path", ".")
    glob = arg(args, "glob", str, None)
    max_results = int_arg(args, "max_results", 100, 1, limits.max_search_matches) or 100
    search = _Search(
        matches=_matcher(pattern, bool_arg(args, "regex"), bool_arg(args, "ignore_case")),
        max_results=max_results,
        max_scan=limits.max_scan_bytes,
        found=[],
    )
    notes = WalkNotes()
    walked_all = True
    hidden: set[str] = set()
    with ws.open(path) as entry:
        if entry.fd is None:
            raise ToolError(f"{path!r} does not exist", path=path)
        rel = ws.relative(path)
        if not entry.is_dir:
            search.file(entry.fd, rel)
        else:
            walk = walk_tree(
                entry.fd,
                rel + "/" if rel else "",
                descend=lambda e: e.name != ".git" and e.rel not in hidden,
                notes=notes,
                max_depth=limits.max_depth,
                max_dir_entries=limits.max_dir_entries,
            )
            with closing(walk):
                for count, e in enumerate(walk):
                    if count >= limits.max_walk_entries:
                        walked_all = False
                        break
                    if ws.guard.hides(e.parent_fd, e.name):
                        hidden.add(e.rel)
                        continue
                    if e.kind != "file" or e.name == ".git" or not _glob_matches(glob, e):
                        continue
                    opened = open_child_file(e.parent_fd, e.name)
                    if opened is None:
                        continue
                    try:
                        search.file(opened[0], e.rel)
                    finally:
                        os.close(opened[0])
                    if search.done:
                        break
    tail: list[str] = []
    if search.full:
        tail.append(f"stopped after {max_results} matches; narrow the search for more")
    if search.scan_exhausted:
        tail.append(f"stopped after searching {limits.max_scan_bytes} bytes")
    if not walked_all:
        tail.append(f"stopped after {limits.max_walk_entries} directory entries")
    if search.binary:
        tail.append(f"skipped {plural(search.binary, 'binary file')}")
    tail += notes.describe()
    if hidden:
        tail.append(Guard.note(len(hidden)))
    body = "\n".join(search.found) if search.found else f"no matches for {pattern!r}"
    return body + "".join(f"\n[{t}]" for t in tail)
