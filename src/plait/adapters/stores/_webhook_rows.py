"""Row shapes of the webhook tables, shared by the SQLite and PostgreSQL stores."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from plait.domain.errors import CorruptStoreError, WebhookNotFoundError
from plait.domain.runs import RunStatus
from plait.domain.webhooks import (
    Delivery,
    DeliveryJob,
    DeliveryStatus,
    Endpoint,
    EndpointStatus,
    WebhookEvent,
)

__all__ = [
    "DELIVERY_COLS",
    "ENDPOINT_COLS",
    "EVENT_COLS",
    "TERMINAL",
    "delivery_from_row",
    "endpoint_from_row",
    "endpoint_row",
    "event_from_row",
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


def endpoint_row(e: Endpoint) -> tuple[Any, ...]:
    """``events`` as ``,a,b,``: a trigger matches an event type with one ``LIKE``/instr."""
    events = "," + ",".join(e.events) + ","
    return (
        e.id,
        e.url,
        events,
        e.secret,
        e.principal,
        e.status.value,
        e.failures,
        e.paused_reason,
        e.created_at,
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
    """``DELIVERY_COLS``, then ``EVENT_COLS`` of the event, then url and secret."""
    return DeliveryJob(
        delivery=delivery_from_row(row[:9]),
        event=event_from_row(row[9:15]),
        url=row[15],
        secret=row[16],
    )


def paused_reason(pause_after: int, error: str | None) -> str:
    return f"paused after {pause_after} consecutive failed attempts (last: {error})"
