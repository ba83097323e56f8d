"""The session files of the JSONL store, ``sessions/<session_id>.jsonl``: each followed by
byte offset, its new lines replayed into a :class:`~._state.SessionState`; a write takes
the file's ``flock``, catches up, plans, appends one line and applies the change."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from plait.adapters.stores.jsonl.files import (
    SAFE_NAME,
    Checkpoint,
    Tracked,
    append_line,
    discard_tail,
    fsync_dir,
    locked,
    read_new,
)
from plait.adapters.stores.jsonl.lines import replay
from plait.adapters.stores.shared import codec
from plait.adapters.stores.shared.state import Change, SessionState, session_not_found
from plait.domain.errors import ConfigError
from plait.domain.session import Session

__all__ = ["SessionFiles"]

T = TypeVar("T")

Plan = Callable[[Tracked], tuple[dict[str, Any], Change | Session, T]]
"""Given the caught-up file: the line to append, what it changes (a new Session for a
create line), and the result to return."""


class SessionFiles:
    def __init__(self, directory: Path, checkpoint: Checkpoint | None) -> None:
        self._dir = directory
        self._checkpoint = checkpoint
        self._tracked: dict[str, Tracked] = {}

    def clear(self) -> None:
        self._tracked.clear()

    def path(self, session_id: str) -> Path | None:
        if not isinstance(session_id, str) or not SAFE_NAME.match(session_id):
            return None
        return self._dir / f"{session_id}.jsonl"

    def _sync(self, sid: str, fd: int, path: Path, *, write: bool) -> Tracked:
        tracked, records, end, torn = read_new(fd, path, self._tracked.get(sid))
        self._tracked[sid] = tracked
        try:
            for line_no, obj in records:
                replay(tracked, obj, path, line_no)
        except BaseException:
            del self._tracked[sid]  # reload from scratch next time
            raise
        tracked.offset = end
        tracked.lines += len(records)
        if torn:
            discard_tail(fd, path, tracked, torn, write=write)
        return tracked

    def read(self, sid: str) -> SessionState:
        path = self.path(sid)
        if path is None:
            raise session_not_found(sid)
        try:
            with locked(path, write=False) as fd:
                state = self._sync(sid, fd, path, write=False).state
        except FileNotFoundError:
            state = None
        if state is None:
            raise session_not_found(sid)
        return state

    def rewrite(
        self, sid: str, plan: Callable[[SessionState, list[dict[str, Any]]], tuple[bool, T]]
    ) -> T:
        """Replace the whole file, under its write lock: ``plan`` gets the caught-up state
        and every line, edits the lines in place and says whether to write them. The new
        file is written under a temporary name, fsynced and renamed over the old one, so
        a crash leaves the old file or the new one; readers and writers of the old file
        notice the new inode and reload."""
        path = self.path(sid)
        if path is None:
            raise session_not_found(sid)
        try:
            with locked(path, write=True) as fd:
                tracked = self._sync(sid, fd, path, write=True)
                if tracked.state is None:
                    raise session_not_found(sid)
                data = os.pread(fd, tracked.offset, 0)
                lines = [codec.loads(raw.decode()) for raw in data.splitlines()]
                changed, result = plan(tracked.state, lines)
                if changed:
                    body = "".join(codec.dumps(x) + "\n" for x in lines).encode()
                    tmp = path.with_name(f".{sid}.{os.getpid()}.{threading.get_ident()}.tmp")
                    try:
                        with tmp.open("wb") as file:
                            file.write(body)
                            file.flush()
                            os.fsync(file.fileno())
                        os.replace(tmp, path)
                    finally:
                        tmp.unlink(missing_ok=True)
                    fsync_dir(self._dir)
                    del self._tracked[sid]  # read the new file from its start
                return result
        except FileNotFoundError:
            raise session_not_found(sid) from None

    def write(
        self,
        sid: str,
        plan: Plan[T],
        *,
        create: bool = False,
    ) -> T:
        path = self.path(sid)
        if path is None:
            if create:
                raise ConfigError(
                    f"session id {sid!r} cannot be used as a file name "
                    f"(allowed: {SAFE_NAME.pattern})",
                    session_id=str(sid),
                )
            raise session_not_found(sid)
        try:
            with locked(path, write=True, create=create) as fd:
                tracked = self._sync(sid, fd, path, write=True)
                if tracked.state is None and not create:
                    raise session_not_found(sid)
                line, change, result = plan(tracked)
                append_line(fd, path, tracked, line, self._checkpoint)
                if isinstance(change, Session):
                    tracked.state = SessionState(change)
                    fsync_dir(self._dir)
                else:
                    assert tracked.state is not None
                    tracked.state.apply(change)
                return result
        except FileNotFoundError:
            raise session_not_found(sid) from None
