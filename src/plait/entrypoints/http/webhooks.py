"""Webhook routes: register an endpoint (its secret is in the answer, once), list,
delete, resume, and read its deliveries. A principal sees and registers endpoints for
its own sessions' events; an admin sees every endpoint and may register one for every
principal's events (no ``principal``) or for one principal's."""

# No ``from __future__ import annotations``: FastAPI reads these signatures at runtime.
from collections.abc import Awaitable, Callable
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Query
from pydantic import BaseModel, ConfigDict, Field

from plait.adapters.shapes import delivery_json, webhook_json
from plait.application.webhooks import WebhookService
from plait.domain.webhooks import URL_PATTERN, DeliveryStatus
from plait.entrypoints.http.auth import Principal

__all__ = ["EventName", "webhook_routes"]


EventName = Literal["run.finished", "approval.needed", "outcome.unknown", "compaction.failed"]


class WebhookIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    url: str = Field(min_length=1, max_length=2000, pattern=URL_PATTERN)
    events: list[EventName] = Field(min_length=1, max_length=16)
    principal: (
        Annotated[str, Field(min_length=1, max_length=200, pattern=r"^[^\x00-\x20\x7f-\x9f]+$")]
        | None
    ) = Field(
        default=None,
        description="admins only: whose sessions' events (default: every principal's)",
    )


class WebhooksOut(BaseModel):
    webhooks: list[dict[str, Any]]


class DeliveriesOut(BaseModel):
    deliveries: list[dict[str, Any]]


def webhook_routes(ctx: Any, who_dep: Callable[..., Awaitable[Principal]]) -> APIRouter:
    router = APIRouter(tags=["webhooks"])
    Who = Annotated[Principal, Depends(who_dep)]
    service = ctx.service
    hooks = WebhookService(store=ctx.store, clock=service.clock, ids=service.ids)

    def scope(who: Principal) -> str | None:
        return None if who.admin else who.name

    @router.post("/webhooks", status_code=201, response_model=dict[str, Any])
    async def add(body: WebhookIn, who: Who) -> dict[str, Any]:
        """Register an endpoint; the answer holds its signing secret (shown once)."""
        principal = body.principal if who.admin else who.name
        endpoint = await hooks.add(body.url, body.events, principal=principal)
        return {**webhook_json(endpoint), "secret": endpoint.secret}

    @router.get("/webhooks", response_model=WebhooksOut)
    async def listing(who: Who) -> dict[str, Any]:
        return {"webhooks": [webhook_json(e) for e in await hooks.endpoints(principal=scope(who))]}

    @router.delete("/webhooks/{webhook_id}", response_model=dict[str, Any])
    async def remove(webhook_id: str, who: Who) -> dict[str, Any]:
        await hooks.remove(webhook_id, principal=scope(who))
        return {"id": webhook_id, "removed": True}

    @router.post("/webhooks/{webhook_id}/resume", response_model=dict[str, Any])
    async def resume(webhook_id: str, who: Who) -> dict[str, Any]:
        """Re-enable a paused endpoint; what it missed is sent again."""
        return webhook_json(await hooks.resume(webhook_id, principal=scope(who)))

    @router.get("/webhooks/{webhook_id}/deliveries", response_model=DeliveriesOut)
    async def deliveries(
        webhook_id: str,
        who: Who,
        status: DeliveryStatus | None = None,
        limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    ) -> dict[str, Any]:
        found = await hooks.deliveries(
            principal=scope(who), endpoint_id=webhook_id, status=status, limit=limit
        )
        return {"deliveries": [delivery_json(d) for d in found]}

    return router
