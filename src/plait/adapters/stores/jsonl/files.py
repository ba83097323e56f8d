"""The file mechanics of the JSONL store: ``flock``\\ ed handles, reading the complete
lines appended since this process last looked (tracked by byte offset), cutting off a
torn last line, appending one fsynced line. Shared by the session files, the run index
and the approvals file."""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from plait.adapters.stores.shared import codec
from plait.adapters.stores.shared.state import SessionState
from plait.adapters.stores.shared.unstorable import unstorable
from plait.domain.errors import CorruptStoreError, StoreError

__all__ = [
    "SAFE_NAME",
    "Checkpoint",
    "StoreWarning",
    "Tracked",
    "append_line",
    "discard_tail",
    "fsync_dir",
    "left_out",
    "locked",
    "read_new",
]

SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$")
"""Ids that may be used as file names (sessions, artifacts)."""

Checkpoint = Callable[[str], None]


class StoreWarning(UserWarning):
    """The store recovered from something odd on disk (e.g. a torn last line)."""


def left_out(error: CorruptStoreError, what: str) -> None:
    """A listing goes on without one damaged session file, and says so."""
    warnings.warn(
        f"damaged session file, {what} left out of this listing: {error.message}",
        StoreWarning,
        stacklevel=3,
    )


@dataclass(slots=True)
class Tracked:
    """How far this process has read one file."""

    ino: int
    offset: int = 0
    lines: int = 0
    state: SessionState | None = None
    warned: set[int] = field(default_factory=set)


@contextmanager
def locked(path: Path, *, write: bool, create: bool = False) -> Iterator[int]:
    flags = (os.O_RDWR if write else os.O_RDONLY) | os.O_CLOEXEC
    if create:
        flags |= os.O_CREAT
    while True:
        fd = os.open(path, flags, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX if write else fcntl.LOCK_SH)
        except BaseException:
            os.close(fd)
            raise
        # A retention rewrite replaces the file (a new inode) while holding the old one's
        # lock: whoever waited on the old file must take the new one.
        try:
            current = os.stat(path).st_ino
        except FileNotFoundError:
            current = None
        if current == os.fstat(fd).st_ino:
            break
        os.close(fd)
    try:
        yield fd
    finally:
        os.close(fd)  # also releases the lock


def read_new(
    fd: int, path: Path, tracked: Tracked | None
) -> tuple[Tracked, list[tuple[int, dict[str, Any]]], int, int]:
    """Complete lines appended since ``tracked``: ``(tracked, [(line_no, obj)], end,
    torn_bytes)``. The caller applies the lines, advances ``tracked`` to ``end``, then
    hands a torn tail to :func:`discard_tail`.
    """
    st = os.fstat(fd)
    if tracked is None or tracked.ino != st.st_ino or st.st_size < tracked.offset:
        tracked = Tracked(ino=st.st_ino)
    if st.st_size == tracked.offset:
        return tracked, [], tracked.offset, 0
    data = os.pread(fd, st.st_size - tracked.offset, tracked.offset)
    cut = data.rfind(b"\n") + 1
    records: list[tuple[int, dict[str, Any]]] = []
    line_no = tracked.lines
    for raw in data[: cut - 1].split(b"\n") if cut else ():
        line_no += 1
        try:
            obj = codec.loads(raw.decode())
        except ValueError as error:
            raise CorruptStoreError(
                f"{path}, line {line_no}: not valid JSON ({error}); the file was not changed",
                path=str(path),
                line=line_no,
            ) from error
        if not isinstance(obj, dict):
            raise CorruptStoreError(
                f"{path}, line {line_no}: not a JSON object", path=str(path), line=line_no
            )
        records.append((line_no, obj))
    return tracked, records, tracked.offset + cut, len(data) - cut


def discard_tail(fd: int, path: Path, tracked: Tracked, torn: int, *, write: bool) -> None:
    """Warn (once per handle) about a torn last line; cut it off under the write lock."""
    if tracked.offset not in tracked.warned:
        tracked.warned.add(tracked.offset)
        warnings.warn(
            f"{path}: discarding a torn last line ({torn} bytes after line "
            f"{tracked.lines}), left by a write that never completed",
            StoreWarning,
            stacklevel=2,
        )
    if write:
        os.ftruncate(fd, tracked.offset)
        os.fsync(fd)


def append_line(
    fd: int,
    path: Path,
    tracked: Tracked,
    obj: dict[str, Any],
    checkpoint: Checkpoint | None = None,
) -> None:
    """Append one line at ``tracked.offset`` and fsync; a failed write is cut off again.
    ``checkpoint("mid_line")`` runs after the first half of the line reached the file."""
    try:
        line = (codec.dumps(obj) + "\n").encode()
    except UnicodeEncodeError as error:  # before anything is written
        raise unstorable(error, str(path)) from error
    try:
        written = 0
        if checkpoint is not None:
            written = os.pwrite(fd, line[: len(line) // 2], tracked.offset)
            checkpoint("mid_line")
        while written < len(line):
            written += os.pwrite(fd, line[written:], tracked.offset + written)
        os.fsync(fd)
    except OSError as error:
        with contextlib.suppress(OSError):
            os.ftruncate(fd, tracked.offset)
        raise StoreError(f"{path}: write failed: {error}", path=str(path)) from error
    tracked.offset += len(line)
    tracked.lines += 1


def fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
