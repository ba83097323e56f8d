"""Webhooks (Standard Webhooks): endpoints, events, deliveries, the retry schedule and
the signature. Pure values and rules: the outbox lives in the stores, the sending in the
adapters.

An *event* is written by the store in the same transaction as the state change it
announces (a run reaching a terminal status, an approval requested, a run left
``awaiting_resolution`` by an unknown outcome, a failed compaction); in that transaction
one *delivery* per matching endpoint is queued. Workers send the deliveries: the same
``webhook-id`` (the event id) on every attempt, so a receiver deduplicates by it.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import re
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any
from urllib.parse import urlsplit

from plait.domain.errors import ConfigError, ValidationError
from plait.domain.record import record
from plait.domain.webhook_schedule import PAUSE_AFTER, RETRY_SECONDS

__all__ = [
    "EVENT_TYPES",
    "PAUSE_AFTER",
    "RETRY_SECONDS",
    "URL_PATTERN",
    "Delivery",
    "DeliveryAttempt",
    "DeliveryJob",
    "DeliveryStatus",
    "Endpoint",
    "EndpointStatus",
    "WebhookEvent",
    "check_events",
    "check_url",
    "configured_endpoints",
    "event_body",
    "new_secret",
    "retry_delay",
    "secret_key",
    "sign",
]

EVENT_TYPES = ("run.finished", "approval.needed", "outcome.unknown", "compaction.failed")
"""What an endpoint can subscribe to."""


class EndpointStatus(StrEnum):
    ACTIVE = "active"
    PAUSED = "paused"


class DeliveryStatus(StrEnum):
    PENDING = "pending"
    DELIVERED = "delivered"
    FAILED = "failed"
    """Gave up after the whole retry schedule."""


@record(kw_only=True)
class Endpoint:
    id: str
    url: str
    events: tuple[str, ...]
    secret: str
    principal: str | None
    """Whose sessions' events it gets; ``None``: every principal's (an admin's, or one
    from the config)."""
    status: EndpointStatus = EndpointStatus.ACTIVE
    failures: int = 0
    """Consecutive failed attempts."""
    paused_reason: str | None = None
    created_at: float = 0.0


@record(kw_only=True)
class WebhookEvent:
    id: str
    type: str
    at: float
    session_id: str | None
    run_id: str | None
    data: dict[str, Any]


@record(kw_only=True)
class Delivery:
    endpoint_id: str
    event_id: str
    event_type: str
    status: DeliveryStatus
    attempts: int
    next_attempt_at: float
    last_error: str | None = None
    last_status_code: int | None = None
    delivered_at: float | None = None


@record(kw_only=True)
class DeliveryJob:
    """A claimed delivery: what to send where."""

    delivery: Delivery
    event: WebhookEvent
    url: str
    secret: str
    principal: str | None = None
    """The endpoint's principal (``None``: an operator's); a principal's endpoint may only
    reach public addresses."""


@record(kw_only=True)
class DeliveryAttempt:
    """One attempt at a delivery, as its worker records it: delivered (``ok``), or due
    again at ``retry_at`` (``None``: failed for good). The endpoint is paused after
    ``pause_after`` consecutive failures."""

    endpoint_id: str
    event_id: str
    at: float
    ok: bool
    status_code: int | None
    error: str | None
    retry_at: float | None
    pause_after: int


URL_PATTERN = r"^https?://[A-Za-z0-9.-]+(:[0-9]{1,5})?([/?#][!-~]*)?$"
"""http(s), a host name or IPv4 address, a port, then printable ASCII without spaces."""


def check_url(url: str) -> str:
    if not isinstance(url, str) or re.fullmatch(URL_PATTERN, url) is None:
        raise ValidationError(
            "a webhook URL must be http:// or https:// with a host name or IPv4 address "
            f"(printable ASCII, no spaces), got {url!r}",
            url=url,
        )
    if not urlsplit(url).hostname:
        raise ValidationError(f"a webhook URL needs a host, got {url!r}", url=url)
    return url


def check_events(events: Sequence[str]) -> tuple[str, ...]:
    if isinstance(events, str):  # one name, not its characters
        events = [events]
    names = tuple(dict.fromkeys(e.strip() for e in events if e.strip()))
    if not names:
        raise ValidationError(
            "a webhook needs at least one event: " + ", ".join(EVENT_TYPES), events=list(events)
        )
    unknown = [e for e in names if e not in EVENT_TYPES]
    if unknown:
        raise ValidationError(
            f"unknown webhook events {unknown}; known: {', '.join(EVENT_TYPES)}",
            events=unknown,
        )
    return names


def new_secret(random_bytes: bytes) -> str:
    """``whsec_`` + base64 of the key (Standard Webhooks)."""
    if len(random_bytes) < 24:
        raise ValidationError("a webhook secret needs at least 24 random bytes")
    return "whsec_" + base64.b64encode(random_bytes).decode()


def secret_key(secret: str) -> bytes:
    raw = secret.removeprefix("whsec_")
    try:
        key = base64.b64decode(raw, validate=True)
    except ValueError:
        raise ValidationError("a webhook secret must be whsec_ + base64") from None
    if not key:
        raise ValidationError("a webhook secret may not be empty")
    return key


def sign(secret: str, *, msg_id: str, timestamp: int, body: str) -> str:
    """The ``webhook-signature`` header: ``v1,`` + base64(HMAC-SHA256(key,
    ``{id}.{timestamp}.{body}``))."""
    signed = f"{msg_id}.{timestamp}.{body}".encode()
    digest = hmac.new(secret_key(secret), signed, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode()


def event_body(event: WebhookEvent) -> str:
    """The JSON body (the same bytes on every attempt): ``type``, ``timestamp`` (ISO
    8601, when the event was committed) and ``data``."""
    stamp = datetime.fromtimestamp(event.at, UTC).isoformat().replace("+00:00", "Z")
    data = {"event_id": event.id, **event.data}
    return json.dumps({"type": event.type, "timestamp": stamp, "data": data}, sort_keys=True)


def retry_delay(attempts: int, schedule: tuple[float, ...], jitter: float) -> float | None:
    """Seconds to wait after ``attempts`` failed attempts, ``jitter`` in [0, 1) spreading
    it by up to +20%; ``None``: give up."""
    if attempts < 1 or attempts > len(schedule):
        return None
    return schedule[attempts - 1] * (1.0 + 0.2 * jitter)


def configured_endpoints(tables: Mapping[str, Any], env: Mapping[str, str]) -> list[Endpoint]:
    """The ``[webhooks.NAME]`` endpoints of the config (``tables``: name -> (file, table)):
    ``url``, ``events``, ``secret_env`` (the environment variable holding the ``whsec_``
    secret); id ``cfg_NAME``, for every principal's events. Errors name the file and key."""
    out = []
    for name, (source, table) in sorted(tables.items()):
        where = f"{source}: [webhooks.{name}]"
        if not isinstance(table, dict):
            raise ConfigError(f"{where} must be a table", file=source, key=name)
        unknown = sorted(set(table) - {"url", "events", "secret_env"})
        if unknown:
            raise ConfigError(
                f"{where}: unknown keys {unknown}; known: url, events, secret_env",
                file=source,
                key=name,
            )
        url, events, secret_env = table.get("url"), table.get("events"), table.get("secret_env")
        if (
            not isinstance(url, str)
            or not isinstance(secret_env, str)
            or not (isinstance(events, list) and all(isinstance(exc, str) for exc in events))
        ):
            raise ConfigError(
                f"{where} needs url (a string), events (a list of strings) and secret_env "
                "(the name of the variable holding its whsec_ secret)",
                file=source,
                key=name,
            )
        secret = env.get(secret_env, "")
        if not secret:
            raise ConfigError(
                f"{where}: ${secret_env} (its secret_env) is not set", file=source, key=name
            )
        if not secret.startswith("whsec_"):
            raise ConfigError(
                f"{where}: ${secret_env} must hold a whsec_ secret", file=source, key=name
            )
        try:
            check_url(url)
            checked = check_events(events)
            secret_key(secret)
        except ValidationError as exc:
            raise ConfigError(f"{where}: {exc.message}", file=source, key=name) from None
        out.append(
            Endpoint(id=f"cfg_{name}", url=url, events=checked, secret=secret, principal=None)
        )
    return out
