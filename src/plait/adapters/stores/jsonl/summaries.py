"""JSONL side of :class:`~plait.application.ports.SummaryStore`: one file per session,
``summaries/<session_id>.jsonl``, beside (not inside) the session's history file, so the
history file's format and hot path are unchanged.

Each write takes ``flock(LOCK_EX)`` on the file, re-reads it, checks the activation rules
of :mod:`..shared.summary_state` against what is there, appends one line and fsyncs. A torn last
line (no newline) is ignored on read and cut off by the next write; a complete line that
does not decode is corruption, reported with the file and line, and nothing is changed.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from plait.adapters.stores.shared import codec
from plait.adapters.stores.shared.summary_codec import (
    constraint_from_dict,
    constraint_to_dict,
    summary_from_dict,
    summary_to_dict,
)
from plait.adapters.stores.shared.summary_state import SummaryBook
from plait.domain.errors import CorruptStoreError, StoreError
from plait.domain.summary import Constraint, Summary

__all__ = ["SummaryFiles", "constraints_line", "summary_line"]

T = TypeVar("T")

Plan = Callable[[SummaryBook], tuple[dict[str, Any] | None, T]]


class SummaryFiles:
    def __init__(self, directory: Path) -> None:
        self._dir = directory

    def _path(self, session_id: str) -> Path:
        return self._dir / f"{session_id}.jsonl"

    def _load(self, fd: int, path: Path) -> tuple[SummaryBook, int]:
        size = os.fstat(fd).st_size
        data = os.pread(fd, size, 0) if size else b""
        cut = data.rfind(b"\n") + 1
        book = SummaryBook()
        for line_number, raw in enumerate(data[: cut - 1].split(b"\n") if cut else (), 1):
            try:
                line = codec.check_schema(codec.loads(raw.decode()), "summary line")
                if line["op"] == "summary":
                    book.summaries.append(summary_from_dict(line["summary"]))
                elif line["op"] == "constraints":
                    book.constraints.extend(constraint_from_dict(c) for c in line["constraints"])
                else:
                    raise ValueError(f"unknown op {line['op']!r}")
            except (ValueError, KeyError, TypeError, CorruptStoreError) as error:
                raise CorruptStoreError(
                    f"{path}, line {line_number}: {error}; the file was not changed",
                    path=str(path),
                    line=line_number,
                ) from error
        return book, cut

    def read(self, session_id: str) -> SummaryBook:
        path = self._path(session_id)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            return SummaryBook()
        try:
            fcntl.flock(fd, fcntl.LOCK_SH)
            return self._load(fd, path)[0]
        finally:
            os.close(fd)

    def write(self, session_id: str, plan: Plan[T]) -> T:
        path = self._path(session_id)
        self._dir.mkdir(exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            book, end = self._load(fd, path)
            line, result = plan(book)
            if line is not None:
                data = (codec.dumps(line) + "\n").encode()
                try:
                    os.ftruncate(fd, end)  # drops a torn last line, if any
                    written = 0
                    while written < len(data):
                        written += os.pwrite(fd, data[written:], end + written)
                    os.fsync(fd)
                except OSError as error:
                    os.ftruncate(fd, end)
                    raise StoreError(f"{path}: write failed: {error}", path=str(path)) from error
            return result
        finally:
            os.close(fd)


def summary_line(summary: Summary) -> dict[str, Any]:
    line: dict[str, Any] = {"schema_version": codec.SCHEMA_VERSION, "op": "summary"}
    line["summary"] = summary_to_dict(summary)
    return line


def constraints_line(constraints: list[Constraint]) -> dict[str, Any]:
    return {
        "schema_version": codec.SCHEMA_VERSION,
        "op": "constraints",
        "constraints": [constraint_to_dict(c) for c in constraints],
    }
