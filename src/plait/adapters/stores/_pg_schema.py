"""Versioned schema migrations of the PostgreSQL store.

Each migration is a tuple of statements applied in one transaction together with the
new version number in ``plait_schema``. Start-up and ``plait db upgrade`` apply the
missing ones under a transaction-scoped advisory lock, so several processes starting at
once apply each migration exactly once. A database written by a newer plait (a version
this code does not know) is refused, untouched.

The layout mirrors the SQLite store: immutable message bodies under an integer key,
session membership ``(session_id, seq, message_id)`` so forks can share bodies, the
session version derived from ``max(seq)``, JSON text (not ``jsonb``) for the sparse
parts so both stores decode rows with the same code. Message text is UTF-8 in ``BYTEA``
because PostgreSQL ``TEXT`` cannot hold NUL characters, which tool output may contain.
"""

from __future__ import annotations

from plait.domain.runs import RunStatus

__all__ = ["LATEST", "MIGRATIONS"]

_LIVE = ", ".join(f"'{s.value}'" for s in RunStatus if not s.terminal)

MIGRATIONS: tuple[tuple[str, ...], ...] = (
    # 1: the store as the SQLite one has it.
    (
        """CREATE TABLE sessions (
            id TEXT PRIMARY KEY, ord BIGINT GENERATED ALWAYS AS IDENTITY,
            created_at DOUBLE PRECISION NOT NULL, owner TEXT, workspace TEXT,
            active_run_id TEXT, parent_session_id TEXT, fork_point_message_id TEXT,
            title TEXT)""",
        "CREATE INDEX sessions_by_created ON sessions (created_at, ord)",
        """CREATE TABLE messages (
            pk BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY, id TEXT NOT NULL,
            kind TEXT NOT NULL, text BYTEA NOT NULL, created_at DOUBLE PRECISION NOT NULL,
            run_id TEXT, step INTEGER, call_id TEXT, name TEXT, status TEXT, extra TEXT,
            schema_version INTEGER NOT NULL)""",
        """CREATE TABLE session_messages (
            session_id TEXT NOT NULL, seq INTEGER NOT NULL, message_id TEXT NOT NULL,
            message_pk BIGINT NOT NULL REFERENCES messages (pk),
            PRIMARY KEY (session_id, seq))""",
        "CREATE UNIQUE INDEX session_messages_by_id ON session_messages (session_id, message_id)",
        """CREATE TABLE runs (
            id TEXT PRIMARY KEY, ord BIGINT GENERATED ALWAYS AS IDENTITY,
            session_id TEXT NOT NULL, status TEXT NOT NULL,
            started_at DOUBLE PRECISION NOT NULL, lease_owner TEXT,
            lease_expires_at DOUBLE PRECISION,
            cancel_requested BOOLEAN NOT NULL DEFAULT FALSE, data TEXT NOT NULL)""",
        "CREATE INDEX runs_by_session ON runs (session_id, started_at, ord)",
        "CREATE INDEX runs_by_started ON runs (started_at, ord)",
        f"CREATE INDEX runs_live ON runs (status) WHERE status IN ({_LIVE})",
        """CREATE TABLE executions (
            session_id TEXT NOT NULL, run_id TEXT NOT NULL, call_id TEXT NOT NULL,
            ord BIGINT GENERATED ALWAYS AS IDENTITY, state TEXT NOT NULL,
            args_digest TEXT NOT NULL, data TEXT NOT NULL,
            PRIMARY KEY (session_id, run_id, call_id))""",
        "CREATE INDEX executions_by_run ON executions (run_id, ord)",
        """CREATE TABLE artifacts (
            id TEXT PRIMARY KEY, sha256 TEXT NOT NULL, size BIGINT NOT NULL,
            media_type TEXT NOT NULL, data BYTEA NOT NULL)""",
    ),
)

LATEST = len(MIGRATIONS)
"""The schema version this code writes."""
