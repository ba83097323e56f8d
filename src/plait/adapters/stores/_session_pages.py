"""Listing sessions a page at a time, newest first, optionally only one owner's.

The order is ``created_at`` descending, then creation order descending; a page after
``before`` (the id of the previous page's last session) continues exactly where that one
stopped, however many sessions were created meanwhile. The SQL stores answer from an
``(owner, created_at)`` index; the in-process stores filter their own list.
"""

from __future__ import annotations

from collections.abc import Sequence

from plait.adapters.stores._state import session_not_found
from plait.domain.session import Session

__all__ = ["OWNER_INDEX_PG", "OWNER_INDEX_SQLITE", "page", "session_page_sql"]

OWNER_INDEX_SQLITE = "CREATE INDEX IF NOT EXISTS sessions_by_owner ON sessions (owner, created_at)"
"""SQLite appends the rowid to every index entry: (owner, created_at, rowid) in order."""
OWNER_INDEX_PG = "CREATE INDEX sessions_by_owner ON sessions (owner, created_at, ord)"


def session_page_sql(
    cols: str, tie: str, mark: str, *, owner: str | None, before: str | None, limit: object
) -> tuple[str, tuple[object, ...]]:
    """The page query and its parameters. ``tie`` is the creation-order column
    (``rowid``, ``ord``), ``mark`` the placeholder (``?``, ``%s``)."""
    where = []
    args: list[object] = []
    if owner is not None:
        where.append(f"s.owner = {mark}")
        args.append(owner)
    if before is not None:
        where.append(
            f"(s.created_at, s.{tie}) < (SELECT b.created_at, b.{tie} FROM sessions AS b "
            f"WHERE b.id = {mark})"
        )
        args.append(before)
    clause = f"WHERE {' AND '.join(where)} " if where else ""
    sql = (
        f"SELECT {cols} FROM sessions AS s {clause}"
        f"ORDER BY s.created_at DESC, s.{tie} DESC LIMIT {mark}"
    )
    return sql, (*args, limit)


def page(
    newest_first: Sequence[Session],
    *,
    owner: str | None,
    before: str | None,
    limit: int | None,
) -> list[Session]:
    """A page of an already ordered list (the in-process stores)."""
    start = 0
    if before is not None:
        at = next((i for i, s in enumerate(newest_first) if s.id == before), None)
        if at is None:
            raise session_not_found(before)
        start = at + 1
    found = [s for s in newest_first[start:] if owner is None or s.owner == owner]
    return found if limit is None else found[: max(limit, 0)]
