"""What waits for a person, across every session the caller may see, a page at a time:
``GET /v1/approvals?status=pending`` (the pending approval requests) and ``GET
/v1/runs?status=awaiting_resolution`` (the runs whose calls have an unknown outcome, with
those calls). A principal sees its own sessions' items, an admin everyone's. Newest
first; the next page is ``?before=<next_before>``. The stores answer from indexes (see
``plait.adapters.stores.shared.inbox_pages``)."""

# No ``from __future__ import annotations``: FastAPI reads these signatures at runtime.
import contextlib
import time
from collections.abc import Awaitable, Callable
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Query
from pydantic import BaseModel, Field

from plait.adapters.shapes import approval_json, execution_json, run_json
from plait.application.subagents import parent_calls
from plait.domain.errors import ApprovalNotFoundError, RunNotFoundError, SessionNotFoundError
from plait.domain.messages import ToolStatus
from plait.domain.runs import RunStatus
from plait.entrypoints.http.auth import Principal
from plait.entrypoints.http.models import RunOut

__all__ = ["inbox_routes"]

Limit = Annotated[int, Query(ge=1, le=500, description="items per page")]
Before = Annotated[
    str | None,
    Query(min_length=1, max_length=200, description="the next_before of the previous page"),
]


class PendingApprovalsOut(BaseModel):
    approvals: list[dict[str, Any]] = Field(
        description="approval requests in the shape of /v1/sessions/{id}/approvals"
    )
    next_before: str | None = None
    """Pass it as ``before`` for the next page (``null``: this was the last)."""


class UnknownCallOut(BaseModel):
    call_id: str
    tool_name: str
    effect: str
    state: str
    result_status: str | None
    args_digest: str
    idempotency_key: str
    requested_at: str | None
    started_at: str | None
    settled_at: str | None
    decision: str | None
    decided_by: str | None
    decision_reason: str | None
    reviewed_at: str | None
    note: str | None = Field(description="what was recorded about the call before it stopped")


class WaitingRunOut(RunOut):
    unknown_calls: list[UnknownCallOut]


class WaitingRunsOut(BaseModel):
    runs: list[WaitingRunOut]
    next_before: str | None = None
    """Pass it as ``before`` for the next page (``null``: this was the last)."""


def inbox_routes(ctx: Any, who_dep: Callable[..., Awaitable[Principal]]) -> APIRouter:
    router = APIRouter(tags=["inbox"])
    Who = Annotated[Principal, Depends(who_dep)]
    store: Any = ctx.store

    async def visible(who: Principal, session_id: str) -> bool:
        try:
            return who.may_see(await store.get_session(session_id))
        except SessionNotFoundError:
            return False

    @router.get("/approvals", response_model=PendingApprovalsOut)
    async def pending_approvals(
        who: Who,
        status: Annotated[Literal["pending"], Query(description="only pending is listed")],
        limit: Limit = 50,
        before: Before = None,
    ) -> dict[str, Any]:
        """Pending approval requests of your sessions (an admin: everyone's), sub-agents'
        included (``parent`` names the call they answer), newest first."""
        if before is not None:
            cursor = None
            with contextlib.suppress(ApprovalNotFoundError):
                cursor = await store.get_approval(before)
            if cursor is None or not await visible(who, cursor.session_id):
                raise ApprovalNotFoundError(
                    f"unknown page cursor before={before!r}: no approval of yours has that "
                    "id; pass the next_before of a previous page",
                    approval_id=before,
                )
        owner = None if who.admin else who.name
        found = await store.list_pending_approvals(owner=owner, before=before, limit=limit + 1)
        more = len(found) > limit
        found = found[:limit]
        parents = await parent_calls(store, found)
        now = time.time()
        return {
            "approvals": [approval_json(a, now, parents.get(a.run_id)) for a in found],
            "next_before": found[-1].id if more else None,
        }

    @router.get("/runs", response_model=WaitingRunsOut)
    async def waiting_runs(
        who: Who,
        status: Annotated[
            Literal["awaiting_resolution"], Query(description="only awaiting_resolution")
        ],
        limit: Limit = 50,
        before: Before = None,
    ) -> dict[str, Any]:
        """Your runs (an admin: everyone's) that wait for a person to say what happened
        to a call, each with its calls whose outcome is unknown, newest first."""
        if before is not None:
            cursor = None
            with contextlib.suppress(RunNotFoundError):
                cursor = await store.get_run(before)
            if cursor is None or not await visible(who, cursor.session_id):
                raise RunNotFoundError(
                    f"unknown page cursor before={before!r}: no run of yours has that id; "
                    "pass the next_before of a previous page",
                    run_id=before,
                )
        owner = None if who.admin else who.name
        found = await store.list_waiting_runs(
            RunStatus(status), owner=owner, before=before, limit=limit + 1
        )
        more = len(found) > limit
        found = found[:limit]
        runs = []
        for run in found:
            unknown = [
                {**execution_json(e), "note": e.note}
                for e in await store.get_executions(run.id)
                if e.result_status is ToolStatus.UNKNOWN
            ]
            runs.append({**run_json(run), "unknown_calls": unknown})
        return {"runs": runs, "next_before": found[-1].id if more else None}

    return router
