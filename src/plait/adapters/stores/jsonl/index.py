"""The JSONL store's run index, ``runs.jsonl``: run id -> session id(s), one line per run,
so a run is found without scanning every session file. The line is written (and fsynced)
before the session line that creates the run, so the index never misses a run; an entry
whose session line never landed is simply not found there."""

from __future__ import annotations

from pathlib import Path

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
from plait.domain.errors import CorruptStoreError

__all__ = ["RunIndex"]


class RunIndex:
    def __init__(self, path: Path, checkpoint: Checkpoint | None) -> None:
        self._path = path
        self._checkpoint = checkpoint
        self._tracked: Tracked | None = None
        self._sessions: dict[str, list[str]] = {}

    def sessions_of(self, run_id: str) -> list[str]:
        """The sessions indexed for ``run_id``, oldest first (as of the last refresh)."""
        return self._sessions.get(run_id, [])

    def items(self) -> list[tuple[str, list[str]]]:
        return list(self._sessions.items())

    def refresh(self) -> None:
        try:
            with locked(self._path, write=False) as fd:
                self._sync(fd, write=False)
        except FileNotFoundError:
            pass

    def add(self, run_id: str, session_id: str) -> None:
        with locked(self._path, write=True, create=True) as fd:
            self._sync(fd, write=True)
            if session_id in self._sessions.get(run_id, ()):
                return
            assert self._tracked is not None
            line = {"schema_version": codec.SCHEMA_VERSION, "run_id": run_id}
            line["session_id"] = session_id
            first = self._tracked.offset == 0
            append_line(fd, self._path, self._tracked, line, self._checkpoint)
            if first:
                fsync_dir(self._path.parent)
            self._sessions.setdefault(run_id, []).append(session_id)

    def _sync(self, fd: int, *, write: bool) -> None:
        tracked, records, end, torn = read_new(fd, self._path, self._tracked)
        if tracked is not self._tracked:
            self._tracked = tracked
            self._sessions = {}
        for line_no, obj in records:
            try:
                obj = codec.check_schema(obj, "run index line")
                rid, sid = obj["run_id"], obj["session_id"]
                if not isinstance(rid, str) or not isinstance(sid, str):
                    raise TypeError("run_id and session_id must be strings")
            except (KeyError, TypeError, CorruptStoreError) as error:
                self._tracked = None
                raise CorruptStoreError(
                    f"{self._path}, line {line_no}: {error}",
                    path=str(self._path),
                    line=line_no,
                ) from error
            sids = self._sessions.setdefault(rid, [])
            if sid not in sids:
                sids.append(sid)
        tracked.offset = end
        tracked.lines += len(records)
        if torn:
            discard_tail(fd, self._path, tracked, torn, write=write)
