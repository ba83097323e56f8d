"""Webhooks: registering endpoints and sending the outbox (workers run
:meth:`WebhookDispatcher.run` next to their runs).

Delivery is at least once, idempotent by event id: a delivery is leased before it is
sent (the lease counts an attempt), so a worker killed mid-delivery leaves it leased
until the lease expires and another worker (or the same one restarted) sends it again
with the same ``webhook-id``. A failed attempt is retried on the schedule of
:data:`~plait.domain.webhooks.RETRY_SECONDS` with jitter; an endpoint failing
``pause_after`` times in a row is paused until ``plait webhooks resume``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from plait.application.ports import Clock, IdGenerator, WebhookSender, WebhookStore
from plait.domain.errors import PlaitError, WebhookNotFoundError
from plait.domain.webhooks import (
    PAUSE_AFTER,
    RETRY_SECONDS,
    Delivery,
    DeliveryAttempt,
    DeliveryJob,
    DeliveryStatus,
    Endpoint,
    check_events,
    check_url,
    event_body,
    new_secret,
    retry_delay,
    sign,
)

__all__ = ["WebhookDispatcher", "WebhookService"]

log = logging.getLogger("plait.webhooks")


@dataclass(slots=True)
class WebhookService:
    """Registration and listing, scoped to a principal (``None``: an admin, who sees and
    registers endpoints for every principal)."""

    store: WebhookStore
    clock: Clock
    ids: IdGenerator
    random_bytes: Callable[[int], bytes] = os.urandom

    async def add(self, url: str, events: Sequence[str], *, principal: str | None) -> Endpoint:
        endpoint = Endpoint(
            id=self.ids.new("wh"),
            url=check_url(url),
            events=check_events(events),
            secret=new_secret(self.random_bytes(32)),
            principal=principal,
            created_at=self.clock.now(),
        )
        await self.store.add_webhook(endpoint)
        return endpoint

    async def put_configured(self, endpoints: list[Endpoint]) -> None:
        """Register (or update) the endpoints of the config; their status is kept."""
        now = self.clock.now()
        for endpoint in endpoints:
            await self.store.put_webhook(replace(endpoint, created_at=now))

    async def endpoints(self, *, principal: str | None) -> list[Endpoint]:
        return await self.store.list_webhooks(principal=principal)

    async def get(self, endpoint_id: str, *, principal: str | None) -> Endpoint:
        endpoint = await self.store.get_webhook(endpoint_id)
        if principal is not None and endpoint.principal != principal:
            raise WebhookNotFoundError(f"no webhook {endpoint_id!r}", webhook_id=endpoint_id)
        return endpoint

    async def remove(self, endpoint_id: str, *, principal: str | None) -> None:
        await self.get(endpoint_id, principal=principal)
        await self.store.remove_webhook(endpoint_id)

    async def resume(self, endpoint_id: str, *, principal: str | None) -> Endpoint:
        await self.get(endpoint_id, principal=principal)
        return await self.store.resume_webhook(endpoint_id, now=self.clock.now())

    async def deliveries(
        self,
        *,
        principal: str | None,
        endpoint_id: str | None = None,
        status: DeliveryStatus | None = None,
        limit: int = 100,
    ) -> list[Delivery]:
        if endpoint_id is not None:
            await self.get(endpoint_id, principal=principal)
        return await self.store.list_deliveries(
            endpoint_id=endpoint_id, status=status, principal=principal, limit=limit
        )


class WebhookDispatcher:
    """Sends due deliveries: ``batch`` at a time, each under a lease of
    ``lease_seconds`` (longer than ``timeout`` of the sender)."""

    def __init__(
        self,
        *,
        store: WebhookStore,
        sender: WebhookSender,
        clock: Clock,
        owner: str,
        lease_seconds: float = 60.0,
        poll_seconds: float = 1.0,
        batch: int = 16,
        schedule: tuple[float, ...] = RETRY_SECONDS,
        pause_after: int = PAUSE_AFTER,
        jitter: Callable[[], float] = random.random,
    ) -> None:
        self.store = store
        self.sender = sender
        self.clock = clock
        self.owner = owner
        self.lease_seconds = lease_seconds
        self.poll_seconds = poll_seconds
        self.batch = batch
        self.schedule = schedule
        self.pause_after = pause_after
        self.jitter = jitter
        self.sent = 0

    async def run(self, stop: asyncio.Event) -> None:
        """Until ``stop`` is set; store errors are logged and retried at the next poll."""
        log.info("webhook deliveries: polling every %s s", self.poll_seconds)
        while not stop.is_set():
            try:
                done = await self.run_once()
            except PlaitError as exc:
                log.error("webhook deliveries: %s", exc.message, extra={"code": exc.code})
                done = 0
            except Exception:  # a bug must not stop every later delivery of this worker
                log.exception("webhook deliveries failed")
                done = 0
            if done == 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), timeout=self.poll_seconds)

    async def run_once(self) -> int:
        """Claim and send one batch; the number claimed."""
        now = self.clock.now()
        jobs = await self.store.claim_deliveries(
            owner=self.owner, now=now, expires_at=now + self.lease_seconds, limit=self.batch
        )
        if jobs:
            await asyncio.gather(*(self._send(job) for job in jobs))
        return len(jobs)

    async def _send(self, job: DeliveryJob) -> None:
        body = event_body(job.event)
        stamp = int(self.clock.now())
        msg_id = job.event.id
        headers = {
            "content-type": "application/json",
            "webhook-id": msg_id,
            "webhook-timestamp": str(stamp),
            "webhook-signature": sign(job.secret, msg_id=msg_id, timestamp=stamp, body=body),
        }
        status: int | None = None
        error: str | None = None
        try:
            status = await self.sender.post(
                job.url, body=body, headers=headers, public_only=job.principal is not None
            )
            if not 200 <= status < 300:
                error = f"HTTP {status}"
        except OSError as exc:
            error = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        ok = error is None
        attempts = job.delivery.attempts
        retry_at: float | None = None
        if not ok:
            delay = retry_delay(attempts, self.schedule, self.jitter())
            retry_at = None if delay is None else self.clock.now() + delay
        await self.store.finish_delivery(
            DeliveryAttempt(
                endpoint_id=job.delivery.endpoint_id,
                event_id=msg_id,
                at=self.clock.now(),
                ok=ok,
                status_code=status,
                error=error,
                retry_at=retry_at,
                pause_after=self.pause_after,
            )
        )
        ids = {"webhook": job.delivery.endpoint_id, "event_id": msg_id}
        if ok:
            self.sent += 1
            log.info("webhook delivered", extra=ids)
        else:
            log.warning("webhook attempt %d failed: %s", attempts, error, extra=ids)
