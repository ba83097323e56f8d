"""Listing sessions a page at a time, newest first, optionally only one owner's.

The order is ``created_at`` descending, then creation order descending; a page after
``before`` (the id of the previous page's last session) continues exactly where that one
stopped, however many sessions were created meanwhile. The SQL stores answer from an
``(owner, created_at)`` index; the memory and JSONL stores keep :class:`OwnerIndex`, the
same order per owner in memory, so a page costs a binary search and the page itself,
whatever the number of sessions (of that owner or of others).
"""

from __future__ import annotations

import itertools
from bisect import bisect_left, insort
from collections.abc import Iterator, Sequence

from plait.adapters.stores.shared.state import session_not_found
from plait.domain.session import Session

__all__ = ["OwnerIndex", "page", "session_page_sql"]


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


_Key = tuple[float, int, str]
"""(created_at, creation order, session id): ascending is oldest first."""


class OwnerIndex:
    """Session ids in listing order, overall and per owner, in sorted lists (the
    in-process stores' ``(owner, created_at)`` index). Not thread-safe: its store's lock
    guards it."""

    def __init__(self) -> None:
        self._order = itertools.count()
        self._keys: dict[str, tuple[_Key, str | None]] = {}
        self._all: list[_Key] = []
        self._by_owner: dict[str | None, list[_Key]] = {}

    def __len__(self) -> int:
        return len(self._keys)

    def __contains__(self, session_id: object) -> bool:
        return session_id in self._keys

    def entry(self, session_id: str) -> tuple[str | None, float]:
        """The indexed owner and creation time of a session (KeyError if none)."""
        key, owner = self._keys[session_id]
        return owner, key[0]

    def add(self, session_id: str, owner: str | None, created_at: float) -> None:
        """Index a session (again: its entry moves, as for a create that was retried)."""
        old = self._keys.pop(session_id, None)
        if old is not None:
            for keys in (self._all, self._by_owner[old[1]]):
                del keys[bisect_left(keys, old[0])]
        key = (created_at, next(self._order), session_id)
        self._keys[session_id] = (key, owner)
        insort(self._all, key)
        insort(self._by_owner.setdefault(owner, []), key)

    def newest_first(self, *, owner: str | None, before: str | None) -> Iterator[str]:
        """Session ids, newest first: one owner's (``owner``) or everyone's, those after
        ``before`` in the overall order (SessionNotFoundError if it is not indexed)."""
        keys = self._all if owner is None else self._by_owner.get(owner, [])
        end = len(keys)
        if before is not None:
            found = self._keys.get(before)
            if found is None:
                raise session_not_found(before)
            end = bisect_left(keys, found[0])
        return (keys[i][2] for i in range(end - 1, -1, -1))
