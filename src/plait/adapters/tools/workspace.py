"""File tools confined to the session's workspace: read, list, search, write, edit.

Every path goes through :class:`~plait.adapters.tools._paths.Workspace`, which walks it
with directory fds so neither ``..``, absolute paths nor symbolic links (including ones
swapped in mid-call) reach outside. Reads are bounded; writes are atomic (temporary file,
fsync, rename) and ``write_file`` can be made a compare-and-write that is safe to retry.
"""

from __future__ import annotations

import asyncio
import fnmatch
import hashlib
import os
import re
import stat
from collections.abc import Callable, Sequence
from contextlib import closing
from dataclasses import dataclass
from typing import IO, Any

from plait.adapters.tools._guard import Guard
from plait.adapters.tools._paths import (
    SNIFF_BYTES,
    Entry,
    MissingParentError,
    TreeEntry,
    WalkNotes,
    Workspace,
    file_state,
    hash_fd,
    is_binary,
    open_child_file,
    replace_file,
    walk_tree,
)
from plait.adapters.tools._specs import SPECS
from plait.application.ports import Tool, ToolInvocation, ToolOutput
from plait.domain.errors import ToolError
from plait.domain.tools import EffectClass, ToolSpec

__all__ = ["WorkspaceLimits", "workspace_tools"]

_MiB = 1024 * 1024
_CHUNK = 64 * 1024  # longest piece of a line read at once
_SHOWN_LINE = 300  # characters of a matching line shown by search_text
_ABSENT = "absent"


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkspaceLimits:
    """Bounds on what one call may read or produce."""

    max_read_bytes: int = 2 * _MiB
    """read_file returns at most this many bytes of content."""
    max_edit_bytes: int = 8 * _MiB
    """edit_file refuses larger files (it holds the whole file in memory)."""
    max_list_entries: int = 1000
    max_search_matches: int = 1000
    """Upper bound of search_text's ``max_results``."""
    max_scan_bytes: int = 256 * _MiB
    """Bytes read to skip lines (read_file), hash a file, or search (search_text)."""
    max_walk_entries: int = 100_000
    max_dir_entries: int = 50_000
    """Names read from one directory (they are sorted in memory)."""
    max_depth: int = 64

    def __post_init__(self) -> None:
        for name in self.__slots__:
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"WorkspaceLimits.{name} must be a positive int")


# --- arguments ------------------------------------------------------------------------------


def _arg(args: dict[str, Any], key: str, kind: type, default: Any) -> Any:
    value = args.get(key, default)
    if value is None and default is None:
        return None
    # bool is an int subclass: an int argument must not accept true/false
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise ToolError(f"argument {key!r} must be of type {kind.__name__}", argument=key)
    return value


def _str(args: dict[str, Any], key: str, default: str | None = None) -> str:
    value = _arg(args, key, str, default)
    if value is None:
        raise ToolError(f"argument {key!r} is required", argument=key)
    assert isinstance(value, str)
    return value


def _int(args: dict[str, Any], key: str, default: int | None, lo: int, hi: int) -> int | None:
    value = _arg(args, key, int, default)
    if value is not None and not lo <= value <= hi:
        raise ToolError(f"argument {key!r} must be between {lo} and {hi}", argument=key)
    assert value is None or isinstance(value, int)
    return value


def _bool(args: dict[str, Any], key: str) -> bool:
    return bool(_arg(args, key, bool, False))


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
    except UnicodeEncodeError as e:
        raise ToolError(f"{what} is not valid Unicode ({e.reason})") from e


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


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


# --- read_file ------------------------------------------------------------------------------


def _read_file(ws: Workspace, args: dict[str, Any], limits: WorkspaceLimits) -> str:
    path = _str(args, "path")
    first = _int(args, "offset_line", 1, 1, 10**12) or 1
    max_lines = _int(args, "max_lines", None, 1, 10**12)
    with ws.open(path) as entry:
        fd = _require_file(entry)
        if is_binary(fd):
            raise ToolError(f"{path!r} is a binary file", path=path)
        with open(fd, "rb", buffering=_CHUNK, closefd=False) as f:
            return _read_lines(f, path, first, max_lines, limits)


def _read_lines(
    f: IO[bytes], path: str, first: int, max_lines: int | None, limits: WorkspaceLimits
) -> str:
    budget = limits.max_read_bytes
    digest = hashlib.sha256()
    out = bytearray()
    line = 0  # number of the line the last piece belongs to
    at_start = True  # the next piece starts a new line
    skipped = 0
    stop: str | None = None
    while piece := f.readline(_CHUNK):
        digest.update(piece)
        starts_line = at_start
        line += starts_line
        at_start = piece.endswith(b"\n")
        if line < first:
            skipped += len(piece)
            if skipped > limits.max_scan_bytes:
                raise ToolError(
                    f"offset_line {first} is too far into {path!r}: more than "
                    f"{limits.max_scan_bytes} bytes precede it",
                    path=path,
                )
            continue
        if max_lines is not None and line >= first + max_lines:
            stop = f"more follows; continue with offset_line={line}"
            line -= 1
            break
        room = budget - len(out)
        if len(piece) > room:
            if starts_line and line > first:
                stop = f"stopped at the {budget}-byte limit; continue with offset_line={line}"
                line -= 1
            else:
                out += _trim_partial_utf8(piece[:room])
                stop = (
                    f"stopped at the {budget}-byte limit inside line {line}, which is "
                    f"cut short; continue with offset_line={line + 1}"
                )
            break
        out += piece
    if stop is None and first > max(line, 1):
        raise ToolError(
            f"offset_line {first} is past the end of {path!r} ({_plural(line, 'line')})",
            path=path,
        )
    text, replaced = _decode(bytes(out))
    notes: list[str] = []
    if stop is None:
        shown = f"lines {first}-{line} of {line}" if first > 1 else _plural(line, "line")
        notes.append(f"end of file; {shown}" if line else "empty file")
        if out and not out.endswith(b"\n"):
            notes.append("no newline at end of file")
        notes.append(f"sha256 {digest.hexdigest()}")
    else:
        notes.append(f"lines {first}-{line}" if line >= first else "no complete line")
        notes.append(stop)
    if replaced:
        notes.append("undecodable bytes are shown as U+FFFD")
    sep = "\n" if text and not text.endswith("\n") else ""
    return f"{text}{sep}[{'; '.join(notes)}]"


# --- list_dir -------------------------------------------------------------------------------

_SUFFIX = {"dir": "/", "link": "@", "file": "", "other": ""}


def _list_dir(ws: Workspace, args: dict[str, Any], limits: WorkspaceLimits) -> str:
    path = _str(args, "path", ".")
    recursive = _bool(args, "recursive")
    with ws.open(path) as entry:
        if entry.fd is None:
            raise ToolError(f"{path!r} does not exist", path=path)
        if not entry.is_dir:
            raise ToolError(f"{path!r} is a file; use read_file", path=path)
        notes = WalkNotes()
        lines: list[str] = []
        links = git = stopped = False
        hidden: set[str] = set()

        def descend(e: TreeEntry) -> bool:
            return recursive and e.name != ".git" and e.rel not in hidden

        walk = walk_tree(
            entry.fd,
            "",
            descend=descend,
            notes=notes,
            max_depth=limits.max_depth,
            max_dir_entries=limits.max_dir_entries,
        )
        with closing(walk):
            for e in walk:
                if len(lines) >= limits.max_list_entries:
                    stopped = True
                    break
                if ws.guard.hides(e.parent_fd, e.name):
                    hidden.add(e.rel)
                    continue
                lines.append(e.rel + _SUFFIX[e.kind])
                links = links or e.kind == "link"
                git = git or (recursive and e.name == ".git")
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


# --- search_text ----------------------------------------------------------------------------


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
        with open(fd, "rb", buffering=_CHUNK, closefd=False) as f:
            line = 0
            at_start = True
            reported = 0
            while piece := f.readline(_CHUNK):
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


def _search_text(ws: Workspace, args: dict[str, Any], limits: WorkspaceLimits) -> str:
    pattern = _str(args, "pattern")
    if not pattern:
        raise ToolError("pattern must not be empty")
    path = _str(args, "path", ".")
    glob = _arg(args, "glob", str, None)
    max_results = _int(args, "max_results", 100, 1, limits.max_search_matches) or 100
    search = _Search(
        matches=_matcher(pattern, _bool(args, "regex"), _bool(args, "ignore_case")),
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
        tail.append(f"skipped {_plural(search.binary, 'binary file')}")
    tail += notes.describe()
    if hidden:
        tail.append(Guard.note(len(hidden)))
    body = "\n".join(search.found) if search.found else f"no matches for {pattern!r}"
    return body + "".join(f"\n[{t}]" for t in tail)


# --- write_file and edit_file ---------------------------------------------------------------


def _write_target(entry: Entry) -> tuple[int, str]:
    if entry.parent_fd is None or entry.name is None or entry.is_dir:
        raise ToolError(f"{entry.display!r} is a directory", path=entry.display)
    return entry.parent_fd, entry.name


def _write_file(ws: Workspace, args: dict[str, Any], limits: WorkspaceLimits) -> str:
    path = _str(args, "path")
    data = _encode(_str(args, "content"), "content")
    expected = _arg(args, "expected_sha256", str, None)
    if expected is not None:
        expected = expected.lower().removeprefix("sha256:")
        if expected != _ABSENT and not re.fullmatch(r"[0-9a-f]{64}", expected):
            raise ToolError(
                "expected_sha256 must be 64 hex digits or 'absent'", argument="expected_sha256"
            )
    new_sha = _sha256(data)
    try:
        entry = ws.open(path)
    except MissingParentError:
        if expected not in (None, _ABSENT):
            raise ToolError(
                f"{path!r} does not exist (expected sha256 {expected})", path=path
            ) from None
        entry = ws.open(path, create_parents=True)
    with entry:
        parent_fd, name = _write_target(entry)
        if expected is not None:
            current = None if entry.fd is None else hash_fd(entry.fd, limits.max_scan_bytes, path)
            if current == new_sha:
                return f"already written: {path!r} holds this content; sha256 {new_sha}"
            if current != (None if expected == _ABSENT else expected):
                found = "it does not exist" if current is None else f"its sha256 is {current}"
                wanted = "not to exist" if expected == _ABSENT else f"sha256 {expected}"
                raise ToolError(
                    f"{path!r} was expected {wanted}, but {found}; nothing was written",
                    path=path,
                    current_sha256=current or _ABSENT,
                )
        mode = None if entry.st is None else stat.S_IMODE(entry.st.st_mode)
        replace_file(
            parent_fd,
            name,
            data,
            display=path,
            mode=mode,
            expect="any" if expected is None else file_state(entry.st),
        )
        verb = "created" if entry.fd is None else "overwrote"
    return f"{verb} {path!r}: {_plural(len(data), 'byte')} written; sha256 {new_sha}"


def _edit_file(ws: Workspace, args: dict[str, Any], limits: WorkspaceLimits) -> str:
    path = _str(args, "path")
    old = _str(args, "old_string")
    new = _str(args, "new_string")
    replace_all = _bool(args, "replace_all")
    if not old:
        raise ToolError("old_string must not be empty", argument="old_string")
    if old == new:
        raise ToolError("old_string and new_string are identical: nothing to change")
    with ws.open(path) as entry:
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
        replace_file(
            parent_fd,
            name,
            result,
            display=path,
            mode=stat.S_IMODE(entry.st.st_mode),
            expect=file_state(entry.st),
        )
    done = count if replace_all else 1
    return f"edited {path!r}: {_plural(done, 'replacement')}; sha256 {_sha256(result)}"


# --- wiring ---------------------------------------------------------------------------------

_Run = Callable[[Workspace, dict[str, Any], WorkspaceLimits], str]
_RUNS: dict[str, _Run] = {
    "read_file": _read_file,
    "list_dir": _list_dir,
    "search_text": _search_text,
    "write_file": _write_file,
    "edit_file": _edit_file,
}


def _tool(spec: ToolSpec, run: _Run, limits: WorkspaceLimits, protected: tuple[str, ...]) -> Tool:
    def blocking(root: str, args: dict[str, Any]) -> str:
        with Workspace(root, guard=Guard(protected)) as ws:
            try:
                return run(ws, args, limits)
            except OSError as e:  # the host path must not reach the model: strerror only
                raise ToolError(f"{spec.name} failed: {e.strerror or type(e).__name__}") from e

    async def execute(invocation: ToolInvocation) -> ToolOutput:
        if invocation.workspace is None:
            raise ToolError("this session has no workspace")
        args = invocation.call.arguments()
        content = await asyncio.to_thread(blocking, invocation.workspace, args)
        return ToolOutput(content=_storable(content))

    # A thread cannot be stopped: a cancelled run waits for the call to finish.
    effect_of = _write_effect if spec.name == "write_file" else None
    return Tool(spec=spec, execute=execute, stoppable=False, effect_of=effect_of)


def _write_effect(args: dict[str, Any]) -> EffectClass:
    """A compare-and-write is idempotent: repeating it after it took effect finds the file
    already holding exactly ``content`` and writes nothing ("already written"); if someone
    changed the file meanwhile, the repeat is refused. Either way no second effect."""
    return EffectClass.IDEMPOTENT if args.get("expected_sha256") else EffectClass.SIDE_EFFECT


def workspace_tools(
    *, limits: WorkspaceLimits | None = None, protected: Sequence[str | os.PathLike[str]] = ()
) -> list[Tool]:
    """The five file tools (read_file, list_dir, search_text, write_file, edit_file),
    each confined to the invocation's workspace. ``protected`` names paths they must never
    read, list, search or write (plait's own store, see
    :func:`plait.adapters.stores.protected_paths`); an attempt is ``denied``."""
    limits = limits or WorkspaceLimits()
    shielded = tuple(os.fspath(p) for p in protected)
    return [
        _tool(
            ToolSpec(name=name, description=text, parameters=schema, effect=effect),
            _RUNS[name],
            limits,
            shielded,
        )
        for name, text, schema, effect in SPECS
    ]
