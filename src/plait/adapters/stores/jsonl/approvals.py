"""Approvals in the JSONL store: ``approvals.jsonl`` beside ``runs.jsonl``, one line per
write holding the whole new record (the last line for an id wins). Writes take the file's
``flock``, read what others appended, check the rule, append and fsync, like every other
JSONL write; a torn last line is ignored and cut off the same way."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from plait.adapters.stores.jsonl.files import (
    Checkpoint,
    Tracked,
    append_line,
    discard_tail,
    fsync_dir,
    locked,
    read_new,
)
from plait.adapters.stores.shared import codec
from plait.adapters.stores.shared.approvals import approval_from_dict, approval_to_dict
from plait.domain.errors import CorruptStoreError
from plait.domain.governance import Approval

__all__ = ["ApprovalFile"]

Plan = Callable[[dict[str, Approval]], tuple[Approval, bool]]
"""Given the current records, the record to return and whether to write it."""


class ApprovalFile:
    def __init__(self, directory: Path, checkpoint: Checkpoint | None) -> None:
        self._dir = directory
        self._checkpoint = checkpoint
        self._path = directory / "approvals.jsonl"
        self._tracked: Tracked | None = None
        self._records: dict[str, Approval] = {}

    def _sync(self, fd: int, *, write: bool) -> None:
        tracked, lines, end, torn = read_new(fd, self._path, self._tracked)
        if tracked is not self._tracked:
            self._records = {}
        try:
            for line_no, obj in lines:
                self._apply(obj, line_no)
        except BaseException:
            self._tracked = None
            raise
        self._tracked = tracked
        tracked.offset = end
        tracked.lines += len(lines)
        if torn:
            discard_tail(fd, self._path, tracked, torn, write=write)

    def _apply(self, obj: dict[str, Any], line_no: int) -> None:
        try:
            approval = approval_from_dict(obj["approval"])
        except (KeyError, TypeError, CorruptStoreError) as error:
            raise CorruptStoreError(
                f"{self._path}, line {line_no}: {error}; the file was not changed",
                path=str(self._path),
                line=line_no,
            ) from error
        self._records[approval.id] = approval

    def read(self) -> dict[str, Approval]:
        try:
            with locked(self._path, write=False) as fd:
                self._sync(fd, write=False)
        except FileNotFoundError:
            return {}
        return dict(self._records)

    def write(self, plan: Plan) -> Approval:
        with locked(self._path, write=True, create=True) as fd:
            self._sync(fd, write=True)
            result, changed = plan(dict(self._records))
            if changed:
                assert self._tracked is not None
                first = self._tracked.offset == 0
                line = {
                    "schema_version": codec.SCHEMA_VERSION,
                    "approval": approval_to_dict(result),
                }
                append_line(fd, self._path, self._tracked, line, self._checkpoint)
                if first:
                    fsync_dir(self._dir)
                self._records[result.id] = result
            return result
