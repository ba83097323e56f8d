"""What a step's context reads on SQLite (the active summary and the constraints), kept
per session between a run's steps so that a step need not go to the I/O thread for it.

Every step of a run builds its context from the session's active summary and
constraints; while a run is driven they seldom change, and a read there is a hand-off to
the store's I/O thread on which the run suspends (so the tool result waiting to ride with
the next step's commit is sent alone, see :mod:`plait.application._journal`).

SQLite's ``PRAGMA data_version`` changes whenever *another* connection commits. The
connection notes it after every context read and inside every commit (which holds the
write lock, so it is current then). A cached read is reused while the last value noted
equals the one noted with the read: no other connection committed anything between that
read and this connection's latest statement, so the answer is what a read would have
returned then (a change committed by another process since is seen from this
connection's next commit on, as if the read had been made a moment earlier). This
connection's own summary and constraint writes drop the session's entry.
"""

from __future__ import annotations

import sqlite3
from typing import TYPE_CHECKING

from plait.adapters.stores.shared.later import Later

if TYPE_CHECKING:
    from plait.adapters.stores.sqlite import summaries
    from plait.domain.summary import Constraint, Summary
else:  # the summaries' codec and domain (~7 ms) at the first context read, not on open
    summaries = Later("plait.adapters.stores.sqlite.summaries")

__all__ = ["ContextCache", "data_version", "read_context"]


def data_version(conn: sqlite3.Connection) -> int:
    return int(conn.execute("PRAGMA data_version").fetchone()[0])


def read_context(
    conn: sqlite3.Connection, session_id: str
) -> tuple[Summary | None, list[Constraint], int]:
    """The session's active summary and constraints from one snapshot, and the
    connection's data version with them."""
    conn.execute("BEGIN")
    try:
        summary = summaries.get_active(conn, session_id)
        constraints = summaries.list_constraints(conn, session_id)
        return summary, constraints, data_version(conn)
    finally:
        conn.execute("COMMIT")


class _Entry:
    """A session's cached read. A plain class: a dataclass with slots is made twice when
    this module loads (~0.6 ms of every store's opening on a slow host)."""

    __slots__ = ("constraints", "summary", "version")

    def __init__(
        self, summary: Summary | None, constraints: tuple[Constraint, ...], version: int
    ) -> None:
        self.summary = summary
        self.constraints = constraints
        self.version = version


class ContextCache:
    def __init__(self, max_sessions: int = 4096) -> None:
        self._entries: dict[str, _Entry] = {}
        self._max = max_sessions
        self.version: int | None = None
        """The connection's data version as last noted (set on the I/O thread)."""

    def get(self, session_id: str) -> tuple[Summary | None, list[Constraint]] | None:
        """The cached read, if no other connection committed since it was made."""
        entry = self._entries.get(session_id)
        if entry is None or entry.version != self.version:
            return None
        return entry.summary, list(entry.constraints)

    def put(
        self, session_id: str, summary: Summary | None, constraints: list[Constraint], version: int
    ) -> None:
        if len(self._entries) >= self._max and session_id not in self._entries:
            self._entries.clear()
        self._entries[session_id] = _Entry(summary, tuple(constraints), version)

    def forget(self, session_id: str) -> None:
        self._entries.pop(session_id, None)
