"""The SQL of the PostgreSQL store (same statements as the SQLite store, in PG's dialect)."""

from __future__ import annotations

from typing import Any

from plait.adapters.stores.postgres.presence import ORPHANED
from plait.adapters.stores.shared.session_pages import session_page_sql
from plait.domain.runs import RunStatus

_LIVE = ", ".join(f"'{s.value}'" for s in RunStatus if not s.terminal)

MIGRATION_LOCK = "SELECT pg_advisory_xact_lock(7311504281)"
CREATE_SCHEMA_TABLE = (
    "CREATE TABLE IF NOT EXISTS plait_schema (version INTEGER PRIMARY KEY, "
    "applied_at TIMESTAMPTZ NOT NULL DEFAULT now())"
)
SCHEMA_VERSION = "SELECT max(version) FROM plait_schema"
RECORD_VERSION = "INSERT INTO plait_schema (version) VALUES (%s)"

_VERSION_OF = "plait_version(s.id)"
_SESSION_COLS = (
    f"s.id, s.created_at, s.owner, s.workspace, {_VERSION_OF}, s.active_run_id, "
    "s.parent_session_id, s.fork_point_message_id, s.title, s.model"
)
RUN_COLS = (
    "id, session_id, status, started_at, lease_owner, lease_expires_at, cancel_requested, data, "
    "lease_token"
)

INSERT_SESSION = (
    "INSERT INTO sessions (id, created_at, owner, workspace, active_run_id, "
    "parent_session_id, fork_point_message_id, title, model) "
    "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s) "
    "ON CONFLICT (id) DO NOTHING"
)
GET_SESSION = f"SELECT {_SESSION_COLS} FROM sessions AS s WHERE s.id = %s"


def session_page(
    *, owner: str | None, before: str | None, limit: int | None
) -> tuple[str, tuple[object, ...]]:
    return session_page_sql(_SESSION_COLS, "ord", "%s", owner=owner, before=before, limit=limit)


SESSION_EXISTS = "SELECT 1 FROM sessions WHERE id = %s"

_MESSAGE_COLS = (
    "m.kind, m.id, m.text, m.created_at, m.run_id, m.step, m.call_id, m.name, m.status, "
    "m.extra, m.schema_version"
)
READ_MESSAGES = (
    f"SELECT sm.seq, {_MESSAGE_COLS} FROM session_messages AS sm "
    "JOIN messages AS m ON m.pk = sm.message_pk "
    "WHERE sm.session_id = %s AND sm.seq > %s AND sm.seq <= %s ORDER BY sm.seq LIMIT %s"
)
"""One segment of a session's history (see segments.py): its owner's rows in a range."""

GET_RUN = f"SELECT {RUN_COLS} FROM runs WHERE id = %s"
LIST_RUNS = f"SELECT {RUN_COLS} FROM runs ORDER BY started_at DESC, ord DESC"
LIST_SESSION_RUNS = (
    f"SELECT {RUN_COLS} FROM runs WHERE session_id = %s ORDER BY started_at DESC, ord DESC"
)
CANCEL = f"UPDATE runs SET cancel_requested = TRUE WHERE id = %s RETURNING {RUN_COLS}"
_CLAIM = (
    "UPDATE runs SET lease_owner = %s, lease_expires_at = %s, lease_token = lease_token + 1 "
    f"WHERE id = %s AND status IN ({_LIVE}) "
    "AND (lease_owner IS NULL OR lease_expires_at <= %s OR lease_owner = %s{}) "
    f"RETURNING {RUN_COLS}"
)
CLAIM = _CLAIM.format("")
CLAIM_OR_ORPHANED = _CLAIM.format(f" OR {ORPHANED}")
"""The claim that also takes a run whose owner's presence ended (see presence.py)."""
RENEW = (
    "UPDATE runs SET lease_expires_at = %s WHERE id = %s AND lease_owner = %s "
    "AND (%s::bigint IS NULL OR lease_token = %s::bigint)"
)
LEASE = "SELECT lease_owner, lease_expires_at, lease_token, status FROM runs WHERE id = %s"
FENCE = "SELECT lease_token, status FROM runs WHERE id = %s FOR SHARE"
_STALE = (
    f"SELECT {RUN_COLS} FROM runs WHERE status IN ({_LIVE}) "
    "AND (%s::text IS NULL OR status = %s::text) "
    "AND (lease_owner IS NULL OR lease_expires_at <= %s{}) ORDER BY started_at, ord"
)
STALE = _STALE.format("")
LEASED = (
    f"SELECT {RUN_COLS} FROM runs WHERE status IN ({_LIVE}) "
    "AND (%s::text IS NULL OR status = %s::text) "
    "AND lease_owner IS NOT NULL AND lease_expires_at > %s ORDER BY started_at, ord"
)
STALE_OR_ORPHANED = _STALE.format(f" OR {ORPHANED}")

LIST_EXECUTIONS = (
    "SELECT data FROM executions WHERE session_id = (SELECT session_id FROM runs WHERE id = %s) "
    "AND run_id = %s ORDER BY ord"
)

PUT_ARTIFACT = (
    "INSERT INTO artifacts (id, sha256, size, media_type, data) VALUES (%s, %s, %s, %s, %s) "
    "ON CONFLICT (id) DO NOTHING"
)
GET_ARTIFACT = "SELECT id, sha256, size, media_type, data FROM artifacts WHERE id = %s"


async def fetch_one(conn: Any, sql: str, params: tuple[Any, ...]) -> Any:
    """The first row of ``sql`` on ``conn`` (``None`` if it returns none)."""
    return await (await conn.execute(sql, params)).fetchone()
