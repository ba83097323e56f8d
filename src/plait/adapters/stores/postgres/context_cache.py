"""What a step's context reads (the active summary and the constraints), kept per
session between a run's steps so a step need not ask the database again.

Every step of a run reads the session's active summary and constraints; while a run is
driven they seldom change, and a read there is a round trip on which the run suspends
(so the tool result's commit waiting to ride with the next step's commit is sent alone,
see :mod:`plait.application._journal`). Each commit (``plait_commit``) therefore also
returns the session's *stamp*: its highest summary generation and its number of
constraints, both only ever growing, so an equal stamp means nothing changed. After a
read, the next commit of that session whose stamp equals the read's makes the read
*fresh*: the next read is answered from it, without I/O (the state as of that commit,
exactly what a read would have seen then; a change committed after it by another
process is seen from the next commit on, as it would be by a read made a moment
earlier). One answer per commit: without a commit in between, the database is read.
This store's own summary and constraint writes drop the session's entry. A worker's
claim (``plait_claim``) returns the stamp too: a session with neither summaries nor
constraints then needs no read before its first step.
"""

from __future__ import annotations

from dataclasses import dataclass

from plait.domain.summary import Constraint, Summary

__all__ = ["ContextCache", "Stamp"]

Stamp = tuple[int, int]
"""(highest summary generation or 0, number of constraints) of a session."""


@dataclass(slots=True)
class _Entry:
    summary: Summary | None
    constraints: tuple[Constraint, ...]
    stamp: Stamp
    fresh: bool = False


class ContextCache:
    def __init__(self, max_sessions: int = 4096) -> None:
        self._entries: dict[str, _Entry] = {}
        self._max = max_sessions

    def take(self, session_id: str) -> tuple[Summary | None, list[Constraint]] | None:
        """The state as of the session's last commit, if a read and that commit agree."""
        entry = self._entries.get(session_id)
        if entry is None or not entry.fresh:
            return None
        entry.fresh = False
        return entry.summary, list(entry.constraints)

    def read(self, session_id: str, summary: Summary | None, constraints: list[Constraint]) -> None:
        """What a read of the database found (not fresh until a commit agrees)."""
        if len(self._entries) >= self._max and session_id not in self._entries:
            self._entries.clear()
        stamp = (0 if summary is None else summary.generation, len(constraints))
        self._entries[session_id] = _Entry(summary, tuple(constraints), stamp)

    def committed(self, session_id: str, stamp: Stamp) -> None:
        """A commit of the session landed; ``stamp`` as of that commit."""
        entry = self._entries.get(session_id)
        if entry is None:
            return
        if entry.stamp == stamp:
            entry.fresh = True
        else:
            del self._entries[session_id]

    def claimed(self, session_id: str, stamp: Stamp) -> None:
        """A claim read the session's stamp: with neither summaries nor constraints the
        state is known (and fresh) without reading it."""
        if stamp == (0, 0):
            self._entries.pop(session_id, None)
            self.read(session_id, None, [])
            self.committed(session_id, stamp)
        else:
            self.forget(session_id)

    def forget(self, session_id: str) -> None:
        self._entries.pop(session_id, None)
