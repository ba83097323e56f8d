"""The JSONL store's session index, ``sessions.jsonl``: one line per session (id, owner,
created_at), so listing one owner's sessions a page at a time reads that page's session
files only, not every file in the store.

As with the run index, the line is written (and fsynced) before the session file is
created, so the index never misses a session; an entry whose file never landed is skipped
when listing. A session indexed twice (a create retried after a crash, with other values)
counts with its last line. A store written before this index existed has no
``sessions.jsonl``: it is built from the session files on the first write, and until then
listings scan as they used to (a read never writes).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
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
from plait.adapters.stores.shared.session_pages import OwnerIndex
from plait.domain.errors import CorruptStoreError
from plait.domain.session import Session

__all__ = ["SessionIndex"]


class SessionIndex:
    def __init__(self, path: Path, checkpoint: Checkpoint | None) -> None:
        self._path = path
        self._checkpoint = checkpoint
        self._tracked: Tracked | None = None
        self._owners = OwnerIndex()

    def refresh(self) -> bool:
        """Read lines other handles appended; False when there is no index to answer
        from yet (a store written before it: list by scanning)."""
        try:
            with locked(self._path, write=False) as fd:
                self._sync(fd, write=False)
        except FileNotFoundError:
            return False
        return len(self._owners) > 0

    def newest_first(self, *, owner: str | None, before: str | None) -> Iterator[str]:
        """As :meth:`OwnerIndex.newest_first`, as of the last :meth:`refresh`."""
        return self._owners.newest_first(owner=owner, before=before)

    def add(self, session: Session, existing: Callable[[], Iterable[Session]]) -> None:
        """Index ``session`` before its file is written. An empty index is first built
        from ``existing`` (the sessions already in the store, read only then)."""
        with locked(self._path, write=True, create=True) as fd:
            self._sync(fd, write=True)
            if len(self._owners) == 0:
                older = sorted(existing(), key=lambda other: (other.created_at, other.id))
                for other in older:
                    if other.id != session.id:
                        self._append(fd, other)
            if self._indexed_as(session):
                return
            self._append(fd, session)

    def _indexed_as(self, session: Session) -> bool:
        return session.id in self._owners and self._owners.entry(session.id) == (
            session.owner,
            session.created_at,
        )

    def _append(self, fd: int, session: Session) -> None:
        assert self._tracked is not None
        line: dict[str, Any] = {"schema_version": codec.SCHEMA_VERSION}
        line |= {"session_id": session.id, "owner": session.owner}
        line["created_at"] = session.created_at
        first = self._tracked.offset == 0
        append_line(fd, self._path, self._tracked, line, self._checkpoint)
        if first:
            fsync_dir(self._path.parent)
        self._owners.add(session.id, session.owner, session.created_at)

    def _sync(self, fd: int, *, write: bool) -> None:
        tracked, records, end, torn = read_new(fd, self._path, self._tracked)
        if tracked is not self._tracked:
            self._tracked = tracked
            self._owners = OwnerIndex()
        for line_no, obj in records:
            try:
                obj = codec.check_schema(obj, "session index line")
                sid, owner, at = obj["session_id"], obj["owner"], obj["created_at"]
                if not isinstance(sid, str) or not (owner is None or isinstance(owner, str)):
                    raise TypeError("session_id and owner must be strings")
                if isinstance(at, bool) or not isinstance(at, int | float):
                    raise TypeError("created_at must be a number")
            except (KeyError, TypeError, CorruptStoreError) as error:
                self._tracked = None
                raise CorruptStoreError(
                    f"{self._path}, line {line_no}: {error}", path=str(self._path), line=line_no
                ) from error
            self._owners.add(sid, owner, float(at))
        tracked.offset = end
        tracked.lines += len(records)
        if torn:
            discard_tail(fd, self._path, tracked, torn, write=write)
