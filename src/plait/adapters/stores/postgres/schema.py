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

from typing import Any

from plait.adapters.stores.postgres import sql as q
from plait.adapters.stores.postgres.functions import (
    CLAIM_FUNCTION,
    CLAIM_FUNCTION_V9,
    CLAIM_FUNCTION_V11,
    CLAIM_FUNCTION_V14,
    CLAIM_FUNCTION_V23,
    COMMIT_EVENTS_FUNCTION,
    COMMIT_EVENTS_FUNCTION_V21,
    COMMIT_EVENTS_FUNCTION_V22,
    COMMIT_EVENTS_FUNCTION_V23,
    COMMIT_FUNCTION,
    COMMIT_FUNCTION_V8,
    COMMIT_FUNCTION_V10,
    COMMIT_FUNCTION_V11,
    COMMIT_FUNCTION_V14,
    COMMIT_FUNCTION_V17,
    COMMIT_FUNCTION_V21,
    COMMIT_FUNCTION_V22,
    MEMBERS_FUNCTION,
    MEMBERS_FUNCTION_V23,
    SEGMENTS_DDL,
    VERSION_FUNCTION,
)
from plait.adapters.stores.postgres.presence import PRESENCE_DDL
from plait.adapters.stores.postgres.webhooks import MIGRATION as WEBHOOKS_MIGRATION
from plait.adapters.stores.shared.inbox_pages import WAITING
from plait.adapters.stores.shared.redact import redact_url
from plait.adapters.stores.shared.unstorable import unstorable
from plait.domain.errors import (
    ConfigError,
    ConflictError,
    CorruptStoreError,
    PlaitError,
    StoreError,
    StoreUnavailableError,
)
from plait.domain.runs import RunStatus

try:
    import psycopg
    from psycopg import errors as pg_errors
except ImportError as error:  # pragma: no cover - depends on the installation
    raise ConfigError(
        "the PostgreSQL store needs psycopg 3 and psycopg_pool: "
        "pip install 'psycopg[binary]' psycopg_pool"
    ) from error

__all__ = ["LATEST", "MIGRATIONS", "prepare", "redact", "translate", "upgrade"]

OWNER_INDEX_PG = "CREATE INDEX sessions_by_owner ON sessions (owner, created_at, ord)"
APPROVALS_PENDING_PG = (
    "CREATE INDEX approvals_pending ON approvals (requested_at, ord) WHERE status = 'pending'"
)
RUNS_WAITING_PG = (
    f"CREATE INDEX runs_waiting ON runs (status, started_at, ord) WHERE status IN ({WAITING})"
)

# Migrations are frozen once released: spell out the statuses each one knew.
_LIVE_V1 = "'running', 'awaiting_approval', 'awaiting_resolution'"
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
        f"CREATE INDEX runs_live ON runs (status) WHERE status IN ({_LIVE_V1})",
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

MIGRATIONS += (
    # 2: forks and compaction (summaries, constraint records).
    (
        """CREATE TABLE fork_requests (
            branch_session_id TEXT PRIMARY KEY, data TEXT NOT NULL)""",
        """CREATE TABLE summaries (
            session_id TEXT NOT NULL, generation INTEGER NOT NULL, id TEXT NOT NULL UNIQUE,
            covered_through_seq INTEGER NOT NULL, data TEXT NOT NULL,
            PRIMARY KEY (session_id, generation))""",
        """CREATE TABLE constraint_records (
            session_id TEXT NOT NULL, source_message_id TEXT NOT NULL, text TEXT NOT NULL,
            ord BIGINT GENERATED ALWAYS AS IDENTITY,
            PRIMARY KEY (session_id, source_message_id, text))""",
    ),
)

MIGRATIONS += (
    # 3: approvals (governance).
    (
        """CREATE TABLE approvals (
            id TEXT PRIMARY KEY, ord BIGINT GENERATED ALWAYS AS IDENTITY,
            session_id TEXT NOT NULL, run_id TEXT NOT NULL, call_id TEXT NOT NULL,
            status TEXT NOT NULL, requested_at DOUBLE PRECISION NOT NULL, data TEXT NOT NULL)""",
        "CREATE INDEX approvals_by_call ON approvals (session_id, run_id, call_id)",
        "CREATE INDEX approvals_by_run ON approvals (run_id)",
    ),
)

MIGRATIONS += (
    # 4: service mode: the queue of runs and their persisted events.
    (
        "DROP INDEX runs_live",
        f"CREATE INDEX runs_live ON runs (status) WHERE status IN ({_LIVE})",
        "CREATE INDEX runs_queued ON runs (started_at, ord) WHERE status = 'queued'",
        """CREATE TABLE run_events (
            run_id TEXT NOT NULL, seq INTEGER NOT NULL, type TEXT NOT NULL,
            at DOUBLE PRECISION NOT NULL, data TEXT NOT NULL, PRIMARY KEY (run_id, seq))""",
        """CREATE TABLE api_keys (
            id TEXT PRIMARY KEY, principal TEXT NOT NULL, role TEXT NOT NULL,
            key_hash TEXT NOT NULL UNIQUE, created_at DOUBLE PRECISION NOT NULL)""",
    ),
    # 5: a principal's sessions, newest first, without scanning everyone's.
    (OWNER_INDEX_PG,),
    # 6: a commit in one statement (one round trip, see functions.py).
    (COMMIT_FUNCTION,),
    # 7: a worker's claim, its run's "running" write and history read in one statement.
    (CLAIM_FUNCTION,),
    # 8: a commit also returns the session's summary/constraint stamp (context cache).
    ("DROP FUNCTION plait_commit", COMMIT_FUNCTION_V8),
    # 9: the claim also returns the session's stamp (no first read of an empty state).
    ("DROP FUNCTION plait_claim", CLAIM_FUNCTION_V9),
    # 10: a commit checks the session's owner and may append at its end (one-statement
    # submission).
    ("DROP FUNCTION plait_commit", COMMIT_FUNCTION_V10),
    # 11: fencing: every claim makes the run's lease token one higher; a commit carries
    # its writer's token and is refused when the run was claimed since (issue 20).
    (
        "ALTER TABLE runs ADD COLUMN lease_token BIGINT NOT NULL DEFAULT 0",
        "DROP FUNCTION plait_commit",
        COMMIT_FUNCTION_V11,
        "DROP FUNCTION plait_claim",
        CLAIM_FUNCTION_V11,
    ),
)

MIGRATIONS += (
    # 12: raw-history retention, the expiry
    # records of tombstoned message bodies (see retention.py).
    (
        """CREATE TABLE message_expiries (
            message_pk BIGINT PRIMARY KEY REFERENCES messages (pk), data TEXT NOT NULL)""",
    ),
)

MIGRATIONS += (
    # 13: webhooks: endpoints, the event outbox written by triggers in the transaction of
    # the state change, and its deliveries (see webhooks.py).
    WEBHOOKS_MIGRATION,
    # 14: token counts per message body and meter, so a resumed session is not measured
    # again (see tokens.py).
    (
        """CREATE TABLE message_tokens (
            message_pk BIGINT NOT NULL REFERENCES messages (pk), meter TEXT NOT NULL,
            tokens INTEGER NOT NULL, PRIMARY KEY (message_pk, meter))""",
    ),
    # 15: forks that do not copy — a branch refers to its ancestors' rows by seq segments
    # (see segments.py); branches made before keep their copied rows and read alike.
    (
        SEGMENTS_DDL,
        MEMBERS_FUNCTION,
        VERSION_FUNCTION,
        "DROP FUNCTION plait_commit",
        COMMIT_FUNCTION_V14,
        "DROP FUNCTION plait_claim",
        CLAIM_FUNCTION_V14,
    ),
    # 16: the pending approvals and the waiting runs of every session, a page at a time
    # (the console's inbox; see shared/inbox_pages.py).
    (APPROVALS_PENDING_PG, RUNS_WAITING_PG),
    # 17: plait_commit reads the session's version without calling plait_version (a SQL
    # function PL/pgSQL plans again in every transaction; see _pg_functions).
    (COMMIT_FUNCTION_V17,),
    # 18: the model a session remembers (`sessions new --model`, its first send).
    ("ALTER TABLE sessions ADD COLUMN model TEXT",),
    # 19: the owners that hold their presence (see presence.py): their runs are free
    # as soon as their process dies, not when their leases expire.
    (PRESENCE_DDL,),
    # 20: a step's commit and its run's pending events in one transaction (see
    # functions.py): one durable flush per step instead of the step's and an event write's.
    (COMMIT_EVENTS_FUNCTION,),
    # 21: a commit checks a new message against an inherited prefix only on a branch that
    # has one, and the step's commit with events is one function, not two (see
    # functions.py): less of the server's CPU per step.
    (COMMIT_FUNCTION_V21, COMMIT_EVENTS_FUNCTION_V21),
    # 22: a commit checks its run's fencing before its version, so a writer whose lease
    # was taken over is told so even after the new holder appended (see functions.py).
    (COMMIT_FUNCTION_V22, COMMIT_EVENTS_FUNCTION_V22),
    # 23: a step commit's event fencing, a claim's history and a branch's members look
    # rows up by key whatever the tables' size was when they were planned (see
    # functions.py).
    (COMMIT_EVENTS_FUNCTION_V23, CLAIM_FUNCTION_V23, MEMBERS_FUNCTION_V23),
)

LATEST = len(MIGRATIONS)
"""The schema version this code writes."""


def redact(url: str) -> str:
    """The URL without its passwords, for messages and logs."""
    return redact_url(url)


_UNAVAILABLE_CLASSES = ("08", "53", "57P", "58")
"""SQLSTATE classes of a transient outage: connection exceptions, insufficient resources
(disk full, out of memory, too many connections), the server shutting down or starting
up (``57P01``-``57P05``, not ``57014`` query_canceled) and system errors (I/O)."""


def is_unavailable(error: psycopg.Error) -> bool:
    """Whether ``e`` is the store being unreachable for now, not a refusal: a connection
    lost or refused (no SQLSTATE: the client's own error), a pool that found no live
    connection in time, or a server-side state listed in :data:`_UNAVAILABLE_CLASSES`.
    Bad credentials (class ``28``) or a missing database (``3D``) stay permanent."""
    state = error.sqlstate
    if state is None:
        return isinstance(error, psycopg.OperationalError | psycopg.InterfaceError)
    return state.startswith(_UNAVAILABLE_CLASSES)


def _refused(error: psycopg.Error) -> bool:
    """A connection the server refused for good: bad credentials, no such role or
    database (libpq reports these at connect time without a SQLSTATE)."""
    text = str(error)
    return any(
        marker in text
        for marker in ("authentication failed", "does not exist", "no pg_hba.conf entry")
    )


def unavailable(error: psycopg.Error, where: str) -> StoreUnavailableError:
    text = " ".join(str(error).split()) or type(error).__name__
    return StoreUnavailableError(
        f"{where}: the PostgreSQL server is unavailable ({text}); retry later",
        store=where,
        sqlstate=error.sqlstate,
    )


def translate(error: psycopg.Error, where: str) -> PlaitError:
    if isinstance(error, psycopg.DataError):  # e.g. a NUL in a TEXT column: the caller's value
        return unstorable(error, where)
    if isinstance(error, pg_errors.UniqueViolation | pg_errors.ForeignKeyViolation):
        return ConflictError(f"{where}: {error.diag.message_primary}", store=where)
    if isinstance(error, pg_errors.SerializationFailure | pg_errors.DeadlockDetected):
        return ConflictError(
            f"{where}: concurrent write ({error}); retry the operation", store=where
        )
    if isinstance(error, pg_errors.LockNotAvailable | pg_errors.QueryCanceled):
        return ConflictError(f"{where}: {error}; retry the operation", store=where)
    if is_unavailable(error):
        return unavailable(error, where)
    if isinstance(error, pg_errors.UndefinedTable):
        return CorruptStoreError(
            f"{where} has no plait tables ({error.diag.message_primary}); run `plait db upgrade`",
            store=where,
        )
    text = str(error).strip() or type(error).__name__
    return StoreError(f"{where}: PostgreSQL error: {text}", store=where, sqlstate=error.sqlstate)


async def upgrade(conn: psycopg.AsyncConnection[Any], where: str) -> tuple[int, int]:
    """Apply the missing migrations on ``conn`` (autocommit). Returns (before, after)."""
    async with conn.transaction():
        await conn.execute(q.MIGRATION_LOCK)
        await conn.execute(q.CREATE_SCHEMA_TABLE)
        cur = await conn.execute(q.SCHEMA_VERSION)
        row = await cur.fetchone()
        before = 0 if row is None or row[0] is None else int(row[0])
        if before > LATEST:
            raise CorruptStoreError(
                f"{where} was written by a newer plait (store schema_version {before}, this "
                f"plait knows {LATEST}); upgrade plait to use it",
                store=where,
                schema_version=before,
                supported=LATEST,
            )
        for version in range(before + 1, LATEST + 1):
            for statement in MIGRATIONS[version - 1]:
                await conn.execute(statement)
            await conn.execute(q.RECORD_VERSION, (version,))
    return before, LATEST


async def check_schema(conn: psycopg.AsyncConnection[Any], where: str) -> None:
    try:
        row = await (await conn.execute(q.SCHEMA_VERSION)).fetchone()
    except pg_errors.UndefinedTable:
        row = None
    version = 0 if row is None or row[0] is None else int(row[0])
    if version != LATEST:
        raise CorruptStoreError(
            f"{where} is at store schema_version {version}, this plait needs {LATEST}; run "
            "`plait db upgrade --db URL`",
            store=where,
            schema_version=version,
            supported=LATEST,
        )


async def prepare(url: str, where: str, *, migrate: bool) -> None:
    """Connect once: apply missing migrations (``migrate``) or check the version. A
    server that does not answer (down, restarting: see :func:`is_unavailable`) is a
    :class:`StoreUnavailableError`, to be retried; one that refuses this user or
    database is a :class:`StoreError` (wrong credentials are not retried)."""
    try:
        async with await psycopg.AsyncConnection.connect(
            url, autocommit=True, connect_timeout=10
        ) as conn:
            if migrate:
                await upgrade(conn, where)
            else:
                await check_schema(conn, where)
    except psycopg.Error as error:
        if is_unavailable(error) and not _refused(error):
            raise unavailable(error, where) from error
        raise StoreError(
            f"cannot open the PostgreSQL store {where}: {str(error).strip()}; check the URL, "
            "that the server runs and accepts this user",
            store=where,
        ) from error
