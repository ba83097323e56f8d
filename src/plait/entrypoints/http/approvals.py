"""Approval routes: list a session's approval requests, approve or deny one. The grantor
is the calling principal. Once a run has no pending request left it goes back to the
queue and a worker continues it (:class:`~plait.application.approvals.ApprovalDesk`):
an approved call runs, a denied one is settled as ``denied`` and the model reads why."""

# No ``from __future__ import annotations``: FastAPI reads these signatures at runtime.
import time
from collections.abc import Awaitable, Callable
from typing import Annotated, Any

from fastapi import APIRouter, Depends
from pydantic import BaseModel, ConfigDict, Field

from plait.adapters.shapes import approval_json
from plait.application.approvals import ApprovalDesk
from plait.application.subagents import parent_calls, sub_agent_sessions
from plait.domain.errors import ApprovalNotFoundError, SessionNotFoundError
from plait.entrypoints.http.auth import Principal
from plait.entrypoints.http.models import Text

__all__ = ["approval_routes"]


class ApproveIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    ttl_seconds: float = Field(default=3600.0, gt=0, le=7 * 86_400)


class DenyIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    reason: Text = Field(min_length=1, max_length=2000, pattern=r"\S")


class ApprovalsOut(BaseModel):
    approvals: list[dict[str, Any]]


def approval_routes(ctx: Any, who_dep: Callable[..., Awaitable[Principal]]) -> APIRouter:
    router = APIRouter(tags=["approvals"])
    Who = Annotated[Principal, Depends(who_dep)]
    store: Any = ctx.store
    desk = ApprovalDesk(approvals=store, service=ctx.service)

    async def own(who: Principal, approval_id: str) -> Any:
        approval = await store.get_approval(approval_id)
        try:
            session = await store.get_session(approval.session_id)
        except SessionNotFoundError:
            session = None
        if session is None or not who.may_see(session):
            raise ApprovalNotFoundError(
                f"approval {approval_id!r} not found", approval_id=approval_id
            )
        return approval

    @router.get("/sessions/{session_id}/approvals", response_model=ApprovalsOut)
    async def list_approvals(session_id: str, who: Who) -> dict[str, Any]:
        """The session's approval requests, newest first."""
        session = await store.get_session(session_id)
        if not who.may_see(session):
            raise SessionNotFoundError(f"session {session_id!r} not found", session_id=session_id)
        now = time.time()
        found = await store.list_approvals(session_id=session_id)
        for child in await sub_agent_sessions(store, session_id):  # one inbox
            found += await store.list_approvals(session_id=child)
        found.sort(key=lambda decided: decided.requested_at, reverse=True)
        parents = await parent_calls(store, found)
        return {"approvals": [approval_json(a, now, parents.get(a.run_id)) for a in found]}

    @router.post("/approvals/{approval_id}/approve", response_model=dict[str, Any])
    async def approve(approval_id: str, body: ApproveIn, who: Who) -> dict[str, Any]:
        """Approve a pending request for ``ttl_seconds`` (anything else is ``run_state``);
        the run continues once none of its requests is pending."""
        await own(who, approval_id)
        decided = await desk.decide(
            approval_id, approve=True, grantor=who.name, ttl_seconds=body.ttl_seconds
        )
        return approval_json(decided, time.time())

    @router.post("/approvals/{approval_id}/deny", response_model=dict[str, Any])
    async def deny(approval_id: str, body: DenyIn, who: Who) -> dict[str, Any]:
        """Deny a pending request with a reason; the run continues and the model reads
        the denial."""
        await own(who, approval_id)
        decided = await desk.decide(
            approval_id, approve=False, grantor=who.name, reason=body.reason
        )
        return approval_json(decided, time.time())

    return router
