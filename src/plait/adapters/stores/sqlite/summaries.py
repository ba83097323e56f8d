"""SQLite side of :class:`~plait.application.ports.SummaryStore`: summary and constraint
tables, and an FTS5 index over message bodies for recall.

The tables are created by the first write that needs them (``CREATE … IF NOT EXISTS``
inside that write's transaction), so opening a store never writes, and an older store
file gains them without a schema bump; reads of a store without them find nothing.

The full-text index (trigram tokenizer: substring matches, Chinese included) is kept off
the hot path: appending a message does not touch it. A search first indexes the message
bodies added since the last search (by integer key, in one transaction), then queries.
Bodies are shared by forks, so one index serves every branch; a query is limited to the
session's own membership (its branch prefix).
"""

from __future__ import annotations

import sqlite3
from typing import Any

from plait.adapters.stores.shared.codec import dumps
from plait.adapters.stores.shared.rows import decode_messages, json_value
from plait.adapters.stores.shared.state import session_not_found
from plait.adapters.stores.shared.summary_codec import summary_from_dict, summary_to_dict
from plait.adapters.stores.shared.summary_state import (
    check_activation,
    duplicate_summary,
    new_constraints,
)
from plait.adapters.stores.sqlite import segments
from plait.adapters.stores.sqlite.conn import VERSION_OF
from plait.domain.recall import matches, search_terms, search_text
from plait.domain.session import Session, StoredMessage
from plait.domain.summary import Constraint, Summary

__all__ = [
    "activate",
    "add_constraints",
    "get_active",
    "list_constraints",
    "list_summaries",
    "search",
]

_DDL = (
    """CREATE TABLE IF NOT EXISTS summaries (
        session_id TEXT NOT NULL, generation INTEGER NOT NULL, id TEXT NOT NULL UNIQUE,
        covered_through_seq INTEGER NOT NULL, data TEXT NOT NULL,
        PRIMARY KEY (session_id, generation))""",
    """CREATE TABLE IF NOT EXISTS constraint_records (
        session_id TEXT NOT NULL, source_message_id TEXT NOT NULL, text TEXT NOT NULL,
        PRIMARY KEY (session_id, source_message_id, text))""",
    "CREATE VIRTUAL TABLE IF NOT EXISTS message_fts USING fts5(body, tokenize='trigram')",
    """CREATE TABLE IF NOT EXISTS message_fts_state (
        id INTEGER PRIMARY KEY CHECK (id = 1), indexed_pk INTEGER NOT NULL)""",
)

_MESSAGE_COLS = (
    "m.kind, m.id, m.text, m.created_at, m.run_id, m.step, m.call_id, m.name, m.status, "
    "m.extra, m.schema_version"
)
_SESSION = f"SELECT {VERSION_OF} FROM sessions AS s WHERE s.id = ?"
_ACTIVE = "SELECT data FROM summaries WHERE session_id = ? ORDER BY generation DESC LIMIT 1"
_ALL = "SELECT data FROM summaries WHERE session_id = ? ORDER BY generation"
_INSERT = (
    "INSERT INTO summaries (session_id, generation, id, covered_through_seq, data) "
    "VALUES (?, ?, ?, ?, ?)"
)
_CONSTRAINTS = (
    "SELECT source_message_id, text FROM constraint_records WHERE session_id = ? ORDER BY rowid"
)
_NEW_BODIES = (
    f"SELECT m.pk, {_MESSAGE_COLS} FROM messages AS m WHERE m.pk > ? ORDER BY m.pk LIMIT 2000"
)
_MATCH = (
    f"SELECT sm.seq, {_MESSAGE_COLS} FROM message_fts AS f "
    "JOIN session_messages AS sm ON sm.message_pk = f.rowid AND sm.session_id = ? "
    "JOIN messages AS m ON m.pk = f.rowid "
    "WHERE message_fts MATCH ? AND sm.seq BETWEEN ? AND ? ORDER BY sm.seq DESC"
)
_SCAN = (
    f"SELECT sm.seq, {_MESSAGE_COLS} FROM session_messages AS sm "
    "JOIN messages AS m ON m.pk = sm.message_pk "
    "WHERE sm.session_id = ? AND sm.seq BETWEEN ? AND ? ORDER BY sm.seq DESC"
)


def _has_tables(conn: sqlite3.Connection) -> bool:
    row = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'summaries'"
    ).fetchone()
    return row is not None


def _ensure(conn: sqlite3.Connection) -> None:
    if not _has_tables(conn):
        for statement in _DDL:
            conn.execute(statement)


def _session(conn: sqlite3.Connection, session_id: str) -> Session:
    row = conn.execute(_SESSION, (session_id,)).fetchone()
    if row is None:
        raise session_not_found(session_id)
    return Session(id=session_id, created_at=0.0, version=int(row[0]))


def _active(conn: sqlite3.Connection, session_id: str) -> Summary | None:
    row = conn.execute(_ACTIVE, (session_id,)).fetchone()
    return None if row is None else summary_from_dict(json_value(row[0], "summary"))


def activate(conn: sqlite3.Connection, summary: Summary, expected_generation: int) -> None:
    """Inside a write transaction."""
    _ensure(conn)
    session = _session(conn, summary.session_id)
    check_activation(session, _active(conn, summary.session_id), summary, expected_generation)
    data = dumps(summary_to_dict(summary))
    try:
        conn.execute(
            _INSERT,
            (summary.session_id, summary.generation, summary.id, summary.covered_through_seq, data),
        )
    except sqlite3.IntegrityError:
        raise duplicate_summary(summary.id) from None


def get_active(conn: sqlite3.Connection, session_id: str) -> Summary | None:
    _session(conn, session_id)
    return _active(conn, session_id) if _has_tables(conn) else None


def list_summaries(conn: sqlite3.Connection, session_id: str) -> list[Summary]:
    _session(conn, session_id)
    if not _has_tables(conn):
        return []
    return [
        summary_from_dict(json_value(r[0], "summary")) for r in conn.execute(_ALL, (session_id,))
    ]


def list_constraints(conn: sqlite3.Connection, session_id: str) -> list[Constraint]:
    _session(conn, session_id)
    if not _has_tables(conn):
        return []
    return [
        Constraint(source_message_id=r[0], text=r[1])
        for r in conn.execute(_CONSTRAINTS, (session_id,))
    ]


def add_constraints(
    conn: sqlite3.Connection, session_id: str, constraints: list[Constraint]
) -> list[Constraint]:
    """Inside a write transaction."""
    _ensure(conn)
    _session(conn, session_id)
    added = new_constraints(list_constraints(conn, session_id), constraints)
    conn.executemany(
        "INSERT INTO constraint_records (session_id, source_message_id, text) VALUES (?, ?, ?)",
        [(session_id, c.source_message_id, c.text) for c in added],
    )
    return added


def catch_up_index(conn: sqlite3.Connection) -> int:
    """Inside a write transaction: index bodies added since the last call. Returns how
    many were indexed."""
    _ensure(conn)
    row = conn.execute("SELECT indexed_pk FROM message_fts_state WHERE id = 1").fetchone()
    last = 0 if row is None else int(row[0])
    done = 0
    while True:
        rows = conn.execute(_NEW_BODIES, (last,)).fetchall()
        if not rows:
            break
        decoded = decode_messages(rows)  # the pk rides in the seq slot
        conn.executemany(
            "INSERT INTO message_fts (rowid, body) VALUES (?, ?)",
            [(sm.seq, search_text(sm.message)) for sm in decoded],
        )
        last = decoded[-1].seq
        done += len(decoded)
    if done:
        conn.execute(
            "INSERT INTO message_fts_state (id, indexed_pk) VALUES (1, ?) "
            "ON CONFLICT (id) DO UPDATE SET indexed_pk = excluded.indexed_pk",
            (last,),
        )
    return done


def _fts_query(terms: list[str]) -> str | None:
    """Terms of three or more characters as an FTS5 AND of quoted strings (trigram needs
    three); ``None`` when no term is long enough."""
    long = [t for t in terms if len(t) >= 3]
    if not long:
        return None
    return " AND ".join('"' + t.replace('"', '""') + '"' for t in long)


def search(
    conn: sqlite3.Connection,
    session_id: str,
    query: str,
    through_seq: int | None,
    limit: int,
) -> list[StoredMessage]:
    """After :func:`catch_up_index`. Exact semantics of :mod:`plait.domain.recall`: the
    FTS query narrows, the same ``matches`` rule decides."""
    terms = search_terms(query)
    session = _session(conn, session_id)
    if limit <= 0:
        return []
    upto = session.version if through_seq is None else through_seq
    fts = _fts_query(terms)
    rows: list[Any] = []
    # newest first: the segments (disjoint seq ranges) from the last one back
    for owner, lo, hi in reversed(list(segments.ranges(conn, session_id, 0, upto))):
        if fts is None:
            rows += conn.execute(_SCAN, (owner, lo, hi)).fetchall()
        else:
            rows += conn.execute(_MATCH, (owner, fts, lo, hi)).fetchall()
    hits: list[StoredMessage] = []
    for sm in decode_messages(rows):
        if matches(terms, sm.message):
            hits.append(sm)
            if len(hits) >= limit:
                break
    return hits
