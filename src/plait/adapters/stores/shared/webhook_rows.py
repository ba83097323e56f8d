"""Row shapes of the webhook tables, shared by the SQLite and PostgreSQL stores."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from plait.domain.errors import CorruptStoreError, WebhookNotFoundError
from plait.domain.runs import RunStatus
from plait.domain.webhooks import (
    Delivery,
    DeliveryAttempt,
    DeliveryJob,
    DeliveryStatus,
    Endpoint,
    EndpointStatus,
    WebhookEvent,
)

__all__ = [
    "DELIVERY_COLS",
    "DUE",
    "ENDPOINT_COLS",
    "EVENT_COLS",
    "JOB",
    "REMOVE",
    "RESUME_DELIVERIES",
    "RESUME_ENDPOINT",
    "TERMINAL",
    "UPSERT",
    "deliveries_query",
    "delivery_from_row",
    "endpoint_from_row",
    "endpoint_row",
    "event_from_row",
    "finish_statements",
    "job_from_row",
    "not_found",
    "paused_reason",
]

TERMINAL = ", ".join(f"'{s.value}'" for s in RunStatus if s.terminal)
ENDPOINT_COLS = "id, url, events, secret, principal, status, failures, paused_reason, created_at"
EVENT_COLS = "id, type, at, session_id, run_id, data"
DELIVERY_COLS = (
    "d.endpoint_id, d.event_id, ev.type, d.status, d.attempts, d.next_attempt_at, "
    "d.last_error, d.last_status_code, d.delivered_at"
)


def not_found(endpoint_id: str) -> WebhookNotFoundError:
    return WebhookNotFoundError(f"no webhook {endpoint_id!r}", webhook_id=endpoint_id)


def endpoint_row(endpoint: Endpoint) -> tuple[Any, ...]:
    """``events`` as ``,a,b,``: a trigger matches an event type with one ``LIKE``/instr."""
    events = "," + ",".join(endpoint.events) + ","
    return (
        endpoint.id,
        endpoint.url,
        events,
        endpoint.secret,
        endpoint.principal,
        endpoint.status.value,
        endpoint.failures,
        endpoint.paused_reason,
        endpoint.created_at,
    )


def endpoint_from_row(row: Sequence[Any]) -> Endpoint:
    id_, url, events, secret, principal, status, failures, reason, created_at = row
    return Endpoint(
        id=id_,
        url=url,
        events=tuple(e for e in str(events).split(",") if e),
        secret=secret,
        principal=principal,
        status=EndpointStatus(status),
        failures=int(failures),
        paused_reason=reason,
        created_at=float(created_at),
    )


def _data(raw: Any) -> dict[str, Any]:
    value = json.loads(raw) if isinstance(raw, str | bytes) else raw
    if not isinstance(value, dict):
        raise CorruptStoreError(f"undecodable webhook event data: {raw!r}")
    return {k: v for k, v in value.items() if v is not None}


def event_from_row(row: Sequence[Any]) -> WebhookEvent:
    id_, type_, at, session_id, run_id, data = row
    return WebhookEvent(
        id=id_, type=type_, at=float(at), session_id=session_id, run_id=run_id, data=_data(data)
    )


def delivery_from_row(row: Sequence[Any]) -> Delivery:
    endpoint_id, event_id, type_, status, attempts, next_at, error, code, delivered = row
    return Delivery(
        endpoint_id=endpoint_id,
        event_id=event_id,
        event_type=type_,
        status=DeliveryStatus(status),
        attempts=int(attempts),
        next_attempt_at=float(next_at),
        last_error=error,
        last_status_code=code,
        delivered_at=None if delivered is None else float(delivered),
    )


def job_from_row(row: Sequence[Any]) -> DeliveryJob:
    """``DELIVERY_COLS``, then ``EVENT_COLS`` of the event, then url, secret and the
    endpoint's principal."""
    return DeliveryJob(
        delivery=delivery_from_row(row[:9]),
        event=event_from_row(row[9:15]),
        url=row[15],
        secret=row[16],
        principal=row[17],
    )


def paused_reason(pause_after: int, error: str | None) -> str:
    return f"paused after {pause_after} consecutive failed attempts (last: {error})"


# --- SQL both stores run (``?`` placeholders; PostgreSQL's module swaps in ``%s``) --------

UPSERT = (
    f"INSERT INTO webhook_endpoints ({ENDPOINT_COLS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) "
    "ON CONFLICT (id) DO UPDATE SET url = excluded.url, events = excluded.events, "
    "secret = excluded.secret, principal = excluded.principal"
)
REMOVE = (
    "DELETE FROM webhook_deliveries WHERE endpoint_id = ?",
    "DELETE FROM webhook_endpoints WHERE id = ?",
)
RESUME_ENDPOINT = (
    "UPDATE webhook_endpoints SET status = 'active', failures = 0, paused_reason = NULL "
    "WHERE id = ?"
)
RESUME_DELIVERIES = (
    "UPDATE webhook_deliveries SET status = 'pending', next_attempt_at = ?, "
    "attempts = CASE WHEN status = 'failed' THEN 0 ELSE attempts END "
    "WHERE endpoint_id = ? AND status IN ('pending', 'failed')"
)
_EV_COLS = ", ".join(f"ev.{c.strip()}" for c in EVENT_COLS.split(","))
JOB = (
    f"SELECT {DELIVERY_COLS}, {_EV_COLS}, e.url, e.secret, e.principal FROM webhook_deliveries d "
    "JOIN webhook_events ev ON ev.id = d.event_id "
    "JOIN webhook_endpoints e ON e.id = d.endpoint_id "
    "WHERE d.endpoint_id = ? AND d.event_id = ?"
)
"""A claimed delivery with its event, URL and secret (see :func:`job_from_row`)."""
DUE = (
    "SELECT d.endpoint_id, d.event_id FROM webhook_deliveries d "
    "JOIN webhook_endpoints e ON e.id = d.endpoint_id "
    "WHERE d.status = 'pending' AND e.status = 'active' AND d.next_attempt_at <= ? "
    "AND (d.lease_expires_at IS NULL OR d.lease_expires_at <= ?) "
    "ORDER BY d.next_attempt_at, d.created_at LIMIT ?"
)
"""Due deliveries of active endpoints: never leased, or whose lease expired (a worker
died mid-delivery)."""


def deliveries_query(
    endpoint_id: str | None, status: DeliveryStatus | None, principal: str | None, limit: int
) -> tuple[str, tuple[Any, ...]]:
    where, args = ["1 = 1"], []
    if endpoint_id is not None:
        where.append("d.endpoint_id = ?")
        args.append(endpoint_id)
    if status is not None:
        where.append("d.status = ?")
        args.append(status.value)
    if principal is not None:
        where.append("e.principal = ?")
        args.append(principal)
    sql = (
        f"SELECT {DELIVERY_COLS} FROM webhook_deliveries d "
        "JOIN webhook_events ev ON ev.id = d.event_id "
        "JOIN webhook_endpoints e ON e.id = d.endpoint_id "
        f"WHERE {' AND '.join(where)} ORDER BY d.created_at DESC, d.event_id DESC LIMIT ?"
    )
    return sql, (*args, limit)


def finish_statements(attempt: DeliveryAttempt) -> list[tuple[str, tuple[Any, ...]]]:
    """Record an attempt. A delivery no longer pending (another worker delivered it
    after this one's lease expired) is left as it is."""
    endpoint_id, status_code, error = attempt.endpoint_id, attempt.status_code, attempt.error
    pause_after = attempt.pause_after
    key = (endpoint_id, attempt.event_id)
    if attempt.ok:
        return [
            (
                "UPDATE webhook_deliveries SET status = 'delivered', delivered_at = ?, "
                "lease_owner = NULL, lease_expires_at = NULL, last_error = NULL, "
                "last_status_code = ? WHERE endpoint_id = ? AND event_id = ? "
                "AND status = 'pending'",
                (attempt.at, status_code, *key),
            ),
            ("UPDATE webhook_endpoints SET failures = 0 WHERE id = ?", (endpoint_id,)),
        ]
    status = DeliveryStatus.FAILED if attempt.retry_at is None else DeliveryStatus.PENDING
    return [
        (
            "UPDATE webhook_deliveries SET status = ?, next_attempt_at = coalesce(?, "
            "next_attempt_at), lease_owner = NULL, lease_expires_at = NULL, last_error = ?, "
            "last_status_code = ? WHERE endpoint_id = ? AND event_id = ? "
            "AND status = 'pending'",
            (status.value, attempt.retry_at, error, status_code, *key),
        ),
        (
            "UPDATE webhook_endpoints SET failures = failures + 1, "
            "status = CASE WHEN failures + 1 >= ? THEN 'paused' ELSE status END, "
            "paused_reason = CASE WHEN failures + 1 >= ? AND status = 'active' THEN ? "
            "ELSE paused_reason END WHERE id = ?",
            (pause_after, pause_after, paused_reason(pause_after, error), endpoint_id),
        ),
    ]
