"""File tools confined to the session's workspace: read, list, search, write, edit.

Every path goes through :class:`~plait.adapters.tools._paths.Workspace`, which walks it
with directory fds so neither ``..``, absolute paths nor symbolic links (including ones
swapped in mid-call) reach outside. Reads are bounded; writes are atomic (temporary file,
fsync, rename) and ``write_file`` can be made a compare-and-write that is safe to retry.
The tools themselves are made by :mod:`.file_tools`; what they do is here, loaded at the
first call of one of them.
"""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Callable
from contextlib import closing
from dataclasses import dataclass, field
from typing import IO, TYPE_CHECKING, Any

from plait.adapters.tools._catalog import ABSENT
from plait.adapters.tools._deadline import Deadline
from plait.adapters.tools._guard import Guard
from plait.adapters.tools._limits import CHUNK, WorkspaceLimits, plural
from plait.adapters.tools._paths import (
    SNIFF_BYTES,
    Entry,
    MissingParentError,
    Workspace,
    file_state,
    hash_fd,
    is_binary,
    replace_file,
)
from plait.adapters.tools._tree import TreeEntry, WalkNotes, walk_tree
from plait.domain.errors import ToolError

if TYPE_CHECKING:  # the typed models import pydantic: see _catalog.parse
    from plait.adapters.tools._specs import EditFile, ListDir, ReadFile, WriteFile

__all__ = ["WorkspaceLimits", "perform"]

# --- helpers --------------------------------------------------------------------------------


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _require_file(entry: Entry) -> int:
    if entry.fd is None:
        raise ToolError(f"{entry.display!r} does not exist", path=entry.display)
    if entry.is_dir:
        raise ToolError(f"{entry.display!r} is a directory; use list_dir", path=entry.display)
    return entry.fd


def _trim_partial_utf8(data: bytes) -> bytes:
    """Drop an incomplete UTF-8 sequence cut off at the end of ``data``."""
    for back in range(1, min(4, len(data)) + 1):
        byte = data[-back]
        if byte & 0xC0 != 0x80:  # an ASCII or lead byte
            need = 2 if byte >> 5 == 0b110 else 3 if byte >> 4 == 0b1110 else 4
            return data[:-back] if byte >= 0xC0 and need > back else data
    return data


def _decode(data: bytes) -> tuple[str, bool]:
    """Text and whether undecodable bytes were replaced."""
    try:
        return data.decode("utf-8"), False
    except UnicodeDecodeError:
        return data.decode("utf-8", "replace"), True


def _encode(text: str, what: str) -> bytes:
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ToolError(f"{what} is not valid Unicode ({exc.reason})") from exc


def _storable(text: str) -> str:
    """File names that are not UTF-8 reach Python as lone surrogates, which no store (and
    no model API) accepts: show their bytes as ``\\xNN`` instead."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        try:
            raw = text.encode("utf-8", "surrogateescape")
        except UnicodeEncodeError:
            raw = text.encode("utf-8", "surrogatepass")
        return raw.decode("utf-8", "backslashreplace")
    return text


# --- read_file ------------------------------------------------------------------------------


def _read_file(ws: Workspace, args: ReadFile, limits: WorkspaceLimits, deadline: Deadline) -> str:
    path, first, max_lines = args.path, args.offset_line, args.max_lines
    with ws.open(path) as entry:
        fd = _require_file(entry)
        if is_binary(fd):
            raise ToolError(f"{path!r} is a binary file", path=path)
        with open(fd, "rb", buffering=CHUNK, closefd=False) as handle:
            return _read_lines(_Lines(path, first, max_lines, limits, deadline), handle)


@dataclass(slots=True)
class _Lines:
    """What one read_file call asked for, and what it read."""

    path: str
    first: int
    max_lines: int | None
    limits: WorkspaceLimits
    deadline: Deadline
    out: bytearray = field(default_factory=bytearray)
    digest: Any = field(default_factory=hashlib.sha256)
    line: int = 0  # number of the line the last piece belongs to
    stop: str | None = None  # why reading stopped before the end of the file

    def skip(self, skipped: int) -> None:
        if skipped > self.limits.max_scan_bytes:
            raise ToolError(
                f"offset_line {self.first} is too far into {self.path!r}: more than "
                f"{self.limits.max_scan_bytes} bytes precede it",
                path=self.path,
            )
        self.deadline.check("read_file")

    def take(self, piece: bytes, starts_line: bool) -> bool:
        """Keep ``piece`` (the next piece of line :attr:`line`); False: stop here."""
        first, budget = self.first, self.limits.max_read_bytes
        if self.max_lines is not None and self.line >= first + self.max_lines:
            self.stop = f"more follows; continue with offset_line={self.line}"
            self.line -= 1
            return False
        room = budget - len(self.out)
        if len(piece) <= room:
            self.out += piece
            return True
        if starts_line and self.line > first:
            self.stop = f"stopped at the {budget}-byte limit; continue with offset_line={self.line}"
            self.line -= 1
        else:
            self.out += _trim_partial_utf8(piece[:room])
            self.stop = (
                f"stopped at the {budget}-byte limit inside line {self.line}, which is "
                f"cut short; continue with offset_line={self.line + 1}"
            )
        return False


def _read_lines(reader: _Lines, handle: IO[bytes]) -> str:
    at_start = True  # the next piece starts a new line
    skipped = 0
    while piece := handle.readline(CHUNK):
        reader.digest.update(piece)
        starts_line = at_start
        reader.line += starts_line
        at_start = piece.endswith(b"\n")
        if reader.line < reader.first:
            skipped += len(piece)
            reader.skip(skipped)
        elif not reader.take(piece, starts_line):
            break
    first, line, out = reader.first, reader.line, reader.out
    if reader.stop is None and first > max(line, 1):
        raise ToolError(
            f"offset_line {first} is past the end of {reader.path!r} ({plural(line, 'line')})",
            path=reader.path,
        )
    text, replaced = _decode(bytes(out))
    notes: list[str] = []
    if reader.stop is None:
        shown = f"lines {first}-{line} of {line}" if first > 1 else plural(line, "line")
        notes.append(f"end of file; {shown}" if line else "empty file")
        if out and not out.endswith(b"\n"):
            notes.append("no newline at end of file")
        notes.append(f"sha256 {reader.digest.hexdigest()}")
    else:
        notes.append(f"lines {first}-{line}" if line >= first else "no complete line")
        notes.append(reader.stop)
    if replaced:
        notes.append("undecodable bytes are shown as U+FFFD")
    sep = "\n" if text and not text.endswith("\n") else ""
    return f"{text}{sep}[{'; '.join(notes)}]"


# --- list_dir -------------------------------------------------------------------------------

_SUFFIX = {"dir": "/", "link": "@", "file": "", "other": ""}


def _list_dir(ws: Workspace, args: ListDir, limits: WorkspaceLimits, deadline: Deadline) -> str:
    path, recursive = args.path, args.recursive
    with ws.open(path) as entry:
        if entry.fd is None:
            raise ToolError(f"{path!r} does not exist", path=path)
        if not entry.is_dir:
            raise ToolError(f"{path!r} is a file; use read_file", path=path)
        notes = WalkNotes()
        lines: list[str] = []
        links = git = stopped = False
        hidden: set[str] = set()

        def descend(entry: TreeEntry) -> bool:
            return recursive and entry.name != ".git" and entry.rel not in hidden

        walk = walk_tree(
            entry.fd,
            "",
            descend=descend,
            notes=notes,
            max_depth=limits.max_depth,
            max_dir_entries=limits.max_dir_entries,
        )
        with closing(walk):
            for walked in walk:
                if len(lines) >= limits.max_list_entries:
                    stopped = True
                    break
                deadline.check("list_dir")
                if ws.guard.hides(walked.parent_fd, walked.name):
                    hidden.add(walked.rel)
                    continue
                lines.append(walked.rel + _SUFFIX[walked.kind])
                links = links or walked.kind == "link"
                git = git or (recursive and walked.name == ".git")
    tail: list[str] = [Guard.note(len(hidden))] if hidden else []
    if not lines:
        return "(empty directory)" + "".join(f"\n[{t}]" for t in tail)
    if links:
        tail.append("entries ending in @ are symbolic links (not listed into)")
    if git:
        tail.append(".git is not listed into")
    if stopped:
        tail.append(
            f"stopped after {limits.max_list_entries} entries; list a subdirectory for more"
        )
    tail += notes.describe()
    return "\n".join(lines) + "".join(f"\n[{t}]" for t in tail)


# --- write_file and edit_file ---------------------------------------------------------------


def _write_target(entry: Entry) -> tuple[int, str]:
    if entry.parent_fd is None or entry.name is None or entry.is_dir:
        raise ToolError(f"{entry.display!r} is a directory", path=entry.display)
    return entry.parent_fd, entry.name


def _write_file(ws: Workspace, args: WriteFile, limits: WorkspaceLimits, deadline: Deadline) -> str:
    path, expected = args.path, args.expected_sha256  # lower-case hex, or 'absent'
    data = _encode(args.content, "content")
    new_sha = _sha256(data)
    try:
        entry = ws.open(path, write=True)
    except MissingParentError:
        if expected not in (None, ABSENT):
            raise ToolError(
                f"{path!r} does not exist (expected sha256 {expected})", path=path
            ) from None
        entry = ws.open(path, create_parents=True, write=True)
    with entry:
        parent_fd, name = _write_target(entry)
        if expected is not None:
            current = None if entry.fd is None else hash_fd(entry.fd, limits.max_scan_bytes, path)
            if current == new_sha:
                return f"already written: {path!r} holds this content; sha256 {new_sha}"
            if current != (None if expected == ABSENT else expected):
                found = "it does not exist" if current is None else f"its sha256 is {current}"
                wanted = "not to exist" if expected == ABSENT else f"sha256 {expected}"
                raise ToolError(
                    f"{path!r} was expected {wanted}, but {found}; nothing was written",
                    path=path,
                    current_sha256=current or ABSENT,
                )
        mode = None if entry.st is None else stat.S_IMODE(entry.st.st_mode)
        deadline.check("write_file")  # a caller that gave up gets no late write
        replace_file(
            parent_fd,
            name,
            data,
            display=path,
            mode=mode,
            expect="any" if expected is None else file_state(entry.st),
        )
        verb = "created" if entry.fd is None else "overwrote"
    return f"{verb} {path!r}: {plural(len(data), 'byte')} written; sha256 {new_sha}"


def _edit_file(ws: Workspace, args: EditFile, limits: WorkspaceLimits, deadline: Deadline) -> str:
    path, old, new, replace_all = args.path, args.old_string, args.new_string, args.replace_all
    if old == new:
        raise ToolError("old_string and new_string are identical: nothing to change")
    with ws.open(path, write=True) as entry:
        fd = _require_file(entry)
        parent_fd, name = _write_target(entry)
        assert entry.st is not None
        data = os.pread(fd, limits.max_edit_bytes + 1, 0)
        if len(data) > limits.max_edit_bytes:
            raise ToolError(
                f"{path!r} is larger than {limits.max_edit_bytes} bytes; edit_file cannot "
                "change it",
                path=path,
            )
        if b"\0" in data[:SNIFF_BYTES]:
            raise ToolError(f"{path!r} is a binary file", path=path)
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            raise ToolError(
                f"{path!r} is not valid UTF-8; use write_file to replace it", path=path
            ) from None
        count = text.count(old)
        if count == 0:
            raise ToolError(
                f"old_string was not found in {path!r} (it must match exactly, including "
                "whitespace and indentation)",
                path=path,
            )
        if count > 1 and not replace_all:
            raise ToolError(
                f"old_string occurs {count} times in {path!r}; include more surrounding "
                "text to make it unique, or set replace_all to replace every occurrence",
                path=path,
                occurrences=count,
            )
        result = _encode(text.replace(old, new, -1 if replace_all else 1), "new_string")
        deadline.check("edit_file")  # a caller that gave up gets no late edit
        replace_file(
            parent_fd,
            name,
            result,
            display=path,
            mode=stat.S_IMODE(entry.st.st_mode),
            expect=file_state(entry.st),
        )
    done = count if replace_all else 1
    return f"edited {path!r}: {plural(done, 'replacement')}; sha256 {_sha256(result)}"


def _search_text(ws: Workspace, args: Any, limits: WorkspaceLimits, deadline: Deadline) -> str:
    # lazy: RE2 and the matchers (~5 ms of start-up) load at the first search, not when
    # the tools are built
    from plait.adapters.tools._search import search_text

    return search_text(ws, args, limits, deadline)


# --- wiring ---------------------------------------------------------------------------------

_Run = Callable[[Workspace, Any, WorkspaceLimits, Deadline], str]
_RUNS: dict[str, _Run] = {
    "read_file": _read_file,
    "list_dir": _list_dir,
    "search_text": _search_text,
    "write_file": _write_file,
    "edit_file": _edit_file,
}


def perform(
    name: str,
    root: str,
    guard: Guard,
    *,
    protect_git: bool,
    write_denied: Callable[[str], str | None] | None,
    args: Any,
    limits: WorkspaceLimits,
    deadline: Deadline,
) -> str:
    """Run the file tool ``name`` in the workspace ``root`` (on a worker thread: it
    blocks); what the model reads (see :mod:`.file_tools`, which makes the tools)."""
    run = _RUNS[name]
    with Workspace(root, guard=guard, protect_git=protect_git, write_denied=write_denied) as ws:
        try:
            return _storable(run(ws, args, limits, deadline))
        except OSError as exc:  # the host path must not reach the model: strerror only
            raise ToolError(f"{name} failed: {exc.strerror or type(exc).__name__}") from exc
