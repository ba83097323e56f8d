"""Webhooks in the memory store: the same rules as the SQL stores' triggers, applied by
the store under its lock in the write that changes the state (so an event and its
deliveries appear together with that change, or not at all)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from plait.adapters.stores.shared.webhook_rows import not_found, paused_reason
from plait.domain.governance import Approval, ApprovalStatus
from plait.domain.runs import Run, RunStatus
from plait.domain.service import EventType, NewRunEvent
from plait.domain.webhooks import (
    Delivery,
    DeliveryAttempt,
    DeliveryJob,
    DeliveryStatus,
    Endpoint,
    EndpointStatus,
    WebhookEvent,
)

__all__ = ["MemoryWebhooks"]


@dataclass(slots=True)
class _Delivery:
    value: Delivery
    created: int
    lease_expires_at: float | None = None


class MemoryWebhooks:
    """Not thread-safe by itself: the memory store calls it under its lock."""

    def __init__(self) -> None:
        self.endpoints: dict[str, Endpoint] = {}
        self.events: dict[str, tuple[WebhookEvent, str | None]] = {}
        self.deliveries: dict[tuple[str, str], _Delivery] = {}

    # --- the triggers ---------------------------------------------------------------------

    def _event(
        self,
        id_: str,
        type_: str,
        at: float,
        run: tuple[str | None, str | None],
        owner: str | None,
        data: dict[str, Any],
    ) -> None:
        if id_ in self.events or not any(
            type_ in endpoint.events for endpoint in self.endpoints.values()
        ):
            return
        session_id, run_id = run
        event = WebhookEvent(
            id=id_,
            type=type_,
            at=at,
            session_id=session_id,
            run_id=run_id,
            data={k: v for k, v in data.items() if v is not None},
        )
        self.events[id_] = (event, owner)
        for endpoint in self.endpoints.values():
            if type_ in endpoint.events and endpoint.principal in (None, owner):
                delivery = Delivery(
                    endpoint_id=endpoint.id,
                    event_id=id_,
                    event_type=type_,
                    status=DeliveryStatus.PENDING,
                    attempts=0,
                    next_attempt_at=0.0,
                )
                self.deliveries[(endpoint.id, id_)] = _Delivery(delivery, len(self.deliveries))

    def run_changed(self, before: Run | None, after: Run, owner: str | None, at: float) -> None:
        if not self.endpoints:
            return
        data = {"run_id": after.id, "session_id": after.session_id, "status": after.status.value}
        where = (after.session_id, after.id)
        if after.status.terminal and (before is None or not before.status.terminal):
            self._event(f"evt_{after.id}_finished", "run.finished", at, where, owner, data)
        waiting = RunStatus.AWAITING_RESOLUTION
        if after.status is waiting and before is not None and before.status is not waiting:
            event_id = f"evt_{os.urandom(12).hex()}"
            self._event(event_id, "outcome.unknown", at, where, owner, data)

    def approval_added(self, approval: Approval, owner: str | None, at: float) -> None:
        if approval.status is not ApprovalStatus.PENDING:
            return
        data = {
            "approval_id": approval.id,
            "session_id": approval.session_id,
            "run_id": approval.run_id,
            "call_id": approval.call_id,
            "tool_name": approval.tool_name,
            "reason": approval.reason,
        }
        where = (approval.session_id, approval.run_id)
        self._event(f"evt_{approval.id}", "approval.needed", at, where, owner, data)

    def events_appended(
        self,
        run: Run,
        owner: str | None,
        first_seq: int,
        events: Sequence[NewRunEvent],
        at: float,
    ) -> None:
        for seq, event in enumerate(events, first_seq):
            if event.type is EventType.COMPACTION and event.data.get("phase") == "failed":
                data = {
                    "run_id": run.id,
                    "session_id": run.session_id,
                    "trigger": event.data.get("trigger"),
                    "reason": event.data.get("reason"),
                }
                where = (run.session_id, run.id)
                self._event(f"evt_{run.id}_{seq}", "compaction.failed", at, where, owner, data)

    # --- the port -------------------------------------------------------------------------

    def add(self, endpoint: Endpoint) -> None:
        self.endpoints[endpoint.id] = endpoint

    def put(self, endpoint: Endpoint) -> None:
        old = self.endpoints.get(endpoint.id)
        if old is not None:
            endpoint = replace(
                old,
                url=endpoint.url,
                events=endpoint.events,
                secret=endpoint.secret,
                principal=endpoint.principal,
            )
        self.endpoints[endpoint.id] = endpoint

    def listing(self, principal: str | None) -> list[Endpoint]:
        found = [e for e in self.endpoints.values() if principal in (None, e.principal)]
        return sorted(found, key=lambda event: (event.created_at, event.id))

    def get(self, endpoint_id: str) -> Endpoint:
        endpoint = self.endpoints.get(endpoint_id)
        if endpoint is None:
            raise not_found(endpoint_id)
        return endpoint

    def remove(self, endpoint_id: str) -> None:
        self.get(endpoint_id)
        del self.endpoints[endpoint_id]
        for key in [k for k in self.deliveries if k[0] == endpoint_id]:
            del self.deliveries[key]

    def resume(self, endpoint_id: str, now: float) -> Endpoint:
        endpoint = replace(
            self.get(endpoint_id), status=EndpointStatus.ACTIVE, failures=0, paused_reason=None
        )
        self.endpoints[endpoint_id] = endpoint
        for key, delivery in self.deliveries.items():
            value = delivery.value
            if key[0] == endpoint_id and value.status is not DeliveryStatus.DELIVERED:
                attempts = 0 if value.status is DeliveryStatus.FAILED else value.attempts
                delivery.value = replace(
                    value, status=DeliveryStatus.PENDING, next_attempt_at=now, attempts=attempts
                )
        return endpoint

    def listing_deliveries(
        self,
        endpoint_id: str | None,
        status: DeliveryStatus | None,
        principal: str | None,
        limit: int,
    ) -> list[Delivery]:
        found = [
            d
            for d in self.deliveries.values()
            if endpoint_id in (None, d.value.endpoint_id)
            and status in (None, d.value.status)
            and principal in (None, self.endpoints[d.value.endpoint_id].principal)
        ]
        found.sort(key=lambda delivery: delivery.created, reverse=True)
        return [d.value for d in found[:limit]]

    def claim(self, now: float, expires_at: float, limit: int) -> list[DeliveryJob]:
        due = [
            entry
            for entry in self.deliveries.values()
            if entry.value.status is DeliveryStatus.PENDING
            and self.endpoints[entry.value.endpoint_id].status is EndpointStatus.ACTIVE
            and entry.value.next_attempt_at <= now
            and (entry.lease_expires_at is None or entry.lease_expires_at <= now)
        ]
        due.sort(key=lambda entry: (entry.value.next_attempt_at, entry.created))
        jobs = []
        for entry in due[:limit]:
            entry.lease_expires_at = expires_at
            entry.value = replace(entry.value, attempts=entry.value.attempts + 1)
            endpoint = self.endpoints[entry.value.endpoint_id]
            event, _ = self.events[entry.value.event_id]
            jobs.append(
                DeliveryJob(
                    delivery=entry.value,
                    event=event,
                    url=endpoint.url,
                    secret=endpoint.secret,
                    principal=endpoint.principal,
                )
            )
        return jobs

    def finish(self, attempt: DeliveryAttempt) -> None:
        key = (attempt.endpoint_id, attempt.event_id)
        delivery = self.deliveries.get(key)
        endpoint = self.endpoints.get(attempt.endpoint_id)
        if (
            delivery is None
            or endpoint is None
            or delivery.value.status is not DeliveryStatus.PENDING
        ):
            return
        delivery.lease_expires_at = None
        if attempt.ok:
            delivery.value = replace(
                delivery.value,
                status=DeliveryStatus.DELIVERED,
                delivered_at=attempt.at,
                last_error=None,
                last_status_code=attempt.status_code,
            )
            self.endpoints[endpoint.id] = replace(endpoint, failures=0)
            return
        retry_at = attempt.retry_at
        delivery.value = replace(
            delivery.value,
            status=DeliveryStatus.FAILED if retry_at is None else DeliveryStatus.PENDING,
            next_attempt_at=delivery.value.next_attempt_at if retry_at is None else retry_at,
            last_error=attempt.error,
            last_status_code=attempt.status_code,
        )
        failures = endpoint.failures + 1
        if failures >= attempt.pause_after and endpoint.status is EndpointStatus.ACTIVE:
            endpoint = replace(
                endpoint,
                status=EndpointStatus.PAUSED,
                paused_reason=paused_reason(attempt.pause_after, attempt.error),
            )
        self.endpoints[endpoint.id] = replace(endpoint, failures=failures)
