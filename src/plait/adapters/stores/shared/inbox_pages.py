"""What waits for a person, across sessions, a page at a time, newest first: pending
approval requests and runs in one waiting status, optionally only one owner's (the owner
of the session they belong to).

The SQL stores answer from partial indexes, so a page costs what waits, not what was
ever stored: approvals from ``approvals_pending`` (``requested_at`` of pending requests
only), runs from ``runs_waiting`` (runs that wait for a person only). A page after ``before``
(the id of the previous page's last item) continues where that one stopped.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

from plait.domain.run_status import RunStatus

T = TypeVar("T")

__all__ = [
    "WAITING",
    "check_waiting",
    "newest_page",
    "pending_approvals_sql",
    "waiting_runs_sql",
]

WAITING = "'awaiting_approval', 'awaiting_resolution'"
"""The statuses of runs that wait for a person, in SQL: each store indexes only those
runs (the ``runs_waiting`` index of its schema), in page order."""


_JOIN = "s.id = x.session_id"
"""With ``CROSS JOIN``: SQLite then reads what waits first (in page order) and looks up
each one's session, rather than every session of the owner and all their approvals;
PostgreSQL plans it as any inner join."""


def check_waiting(status: RunStatus) -> None:
    """Only the statuses of runs waiting for a person are listed this way (the index)."""
    if status not in (RunStatus.AWAITING_APPROVAL, RunStatus.AWAITING_RESOLUTION):
        raise ValueError(f"only waiting runs are listed by status, not {status.value!r}")


def _where(
    table: str, tie: str, at: str, mark: str, owner: str | None, before: str | None
) -> tuple[list[str], list[object]]:
    where: list[str] = []
    args: list[object] = []
    if owner is not None:
        where.append(f"s.owner = {mark}")
        args.append(owner)
    if before is not None:
        where.append(
            f"(x.{at}, x.{tie}) < (SELECT b.{at}, b.{tie} FROM {table} AS b WHERE b.id = {mark})"
        )
        args.append(before)
    return where, args


def pending_approvals_sql(
    tie: str, mark: str, *, owner: str | None, before: str | None, limit: object
) -> tuple[str, tuple[object, ...]]:
    """The page query (one column: the approval's data) and its parameters. ``tie``:
    the creation-order column (``rowid``, ``ord``), ``mark`` the placeholder."""
    where, args = _where("approvals", tie, "requested_at", mark, owner, before)
    clause = " AND ".join(["x.status = 'pending'", _JOIN, *where])
    sql = (
        "SELECT x.data FROM approvals AS x CROSS JOIN sessions AS s "
        f"WHERE {clause} "
        f"ORDER BY x.requested_at DESC, x.{tie} DESC LIMIT {mark}"
    )
    return sql, (*args, limit)


def waiting_runs_sql(
    cols: str,
    tie: str,
    mark: str,
    *,
    status: RunStatus,
    owner: str | None,
    before: str | None,
    limit: object,
) -> tuple[str, tuple[object, ...]]:
    """The page query (``cols`` of ``runs``) and its parameters."""
    check_waiting(status)
    where, args = _where("runs", tie, "started_at", mark, owner, before)
    columns = ", ".join(f"x.{c.strip()}" for c in cols.split(","))
    # the status spelled out (an enum's value) after the index's own condition, word for
    # word: SQLite uses a partial index only for a query that repeats its condition
    waiting = f"x.status IN ({WAITING}) AND x.status = '{status.value}'"
    clause = " AND ".join([waiting, _JOIN, *where])
    sql = (
        f"SELECT {columns} FROM runs AS x CROSS JOIN sessions AS s "
        f"WHERE {clause} "
        f"ORDER BY x.started_at DESC, x.{tie} DESC LIMIT {mark}"
    )
    return sql, (*args, limit)


def newest_page(
    stored: Sequence[T],
    *,
    at: Callable[[T], float],
    id_of: Callable[[T], str],
    keep: Callable[[T], bool],
    before: str | None,
    limit: int | None,
    missing: Callable[[str], Exception],
) -> list[T]:
    """The in-process stores' page: ``stored`` in storage order; newest ``at`` first,
    the later-stored first among equal times, after ``before`` (any stored item, kept or
    not: ``missing(before)`` if none has that id). A linear pass over what is stored."""
    rank = {id_of(x): (at(x), n) for n, x in enumerate(stored)}
    if before is not None and before not in rank:
        raise missing(before)
    found = [x for x in stored if keep(x) and (before is None or rank[id_of(x)] < rank[before])]
    found.sort(key=lambda item: rank[id_of(item)], reverse=True)
    return found if limit is None else found[: max(limit, 0)]
