"""Compaction routes (docs/design.md#compaction over HTTP): compact a session now, show what the
next model call would see with its token breakdown, and read evidence a summary left out.

- ``POST /v1/sessions/{id}/compact``: the outcome (``status`` ``compacted``,
  ``nothing_to_compact``, ``failed`` with the reason, ...) and the activated summary.
- ``GET /v1/sessions/{id}/context?items=``: budget, token breakdown, active summary and
  constraint records of the next call (``items``: every item with its source and trust).
- ``GET /v1/sessions/{id}/evidence?message_id=|artifact_id=&offset=&length=|query=&limit=``:
  a raw message, an artifact slice, or search hits, only from the session's own branch; a
  source that is not there answers ``404 not_found`` (``details.missing``); one whose
  content the retention policy removed answers with its ``expired`` record (an artifact
  of an expired message: ``content`` null), never as missing.

Someone else's session answers ``not_found`` like one that does not exist. The routes
use the compaction stage the runs use (same instructions, tools and model profiles).
"""

# No ``from __future__ import annotations``: FastAPI reads these signatures at runtime.
from collections.abc import Awaitable, Callable
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request

from plait.adapters.shapes import expiry_json, message_json, outcome_json, view_json
from plait.application.compaction.recall import (
    MAX_SLICE,
    ExpiredSource,
    find_artifact,
    find_message,
    search,
)
from plait.application.compaction.stage import CompactionStage
from plait.application.retention import expiries_of
from plait.domain.errors import (
    EvidenceMissingError,
    SessionNotFoundError,
    TokenMeterModelUnconfiguredError,
)
from plait.domain.recall import QUERY_PATTERN
from plait.domain.text import ID_PATTERN
from plait.entrypoints.http._errors import ApiError
from plait.entrypoints.http.auth import Principal

__all__ = ["compaction_routes", "compaction_stage"]


def compaction_stage(ctx: Any) -> CompactionStage | None:
    """The compaction stage of the API's agent service (``None``: compaction is off)."""
    stage = getattr(getattr(ctx.service, "driver", None), "compaction", None)
    return stage if isinstance(stage, CompactionStage) else None


def compaction_routes(
    ctx: Any, stage: CompactionStage, who_dep: Callable[..., Awaitable[Principal]]
) -> APIRouter:
    router = APIRouter(tags=["compaction"])
    Who = Annotated[Principal, Depends(who_dep)]
    store: Any = ctx.store
    service = stage.service

    async def own(who: Principal, session_id: str) -> None:
        session = await store.get_session(session_id)
        if not who.may_see(session):
            raise SessionNotFoundError(f"session {session_id!r} not found", session_id=session_id)

    @router.post("/sessions/{session_id}/compact", response_model=dict[str, Any])
    async def compact(session_id: str, who: Who) -> dict[str, Any]:
        """Summarize the session's older complete units now (raw history is kept)."""
        await own(who, session_id)
        outcome = await service.compact(
            session_id, trigger="manual", instructions=stage.instructions, tools=stage.tools
        )
        return outcome_json(outcome)

    @router.get("/sessions/{session_id}/context", response_model=dict[str, Any])
    async def context(session_id: str, who: Who, items: bool = False) -> dict[str, Any]:
        """What the next model call would see, with its token breakdown."""
        await own(who, session_id)
        history = [sm.message for sm in await store.read_messages(session_id)]
        caller = ctx.service.caller
        model = caller.model.name if caller.has_model else service.routed_model(history)
        if not model:
            raise TokenMeterModelUnconfiguredError(
                "TOKEN_METER_MODEL_UNCONFIGURED: this API process has no model and the "
                "session has no model turn yet, so no context window decides the budget; "
                "start the API with PLAIT_MODEL set",
            )
        # measured like `plait context`: a model without a window is the RFC's error
        view = await service.view(
            session_id, history, model=model, instructions=stage.instructions, tools=stage.tools
        )
        return view_json(view, items=items)

    @router.get(
        "/sessions/{session_id}/evidence",
        response_model=dict[str, Any],
        openapi_extra={"parameters": [_SELECTOR]},
    )
    async def evidence(
        session_id: str,
        who: Who,
        request: Request,
        message_id: Annotated[str | None, _hidden(min_length=1)] = None,
        artifact_id: Annotated[str | None, _hidden(min_length=1)] = None,
        offset: Annotated[int, _hidden(ge=0)] = 0,
        length: Annotated[int, _hidden(ge=1, le=MAX_SLICE)] = 8_000,
        query: Annotated[str | None, _hidden(min_length=1, max_length=500)] = None,
        limit: Annotated[int, _hidden(ge=1, le=50)] = 10,
    ) -> dict[str, Any]:
        """Originals a summary left out, from this session's branch only: exactly one
        of a message (``message_id``), an artifact slice (``artifact_id`` with
        ``offset`` and ``length``) or a search (``query`` with ``limit``)."""
        await own(who, session_id)
        _check_selector(set(request.query_params))
        asked = (message_id, artifact_id, query)
        return await _lookup(store, session_id, asked, (offset, length), limit)

    return router


_SELECTORS: dict[str, dict[str, Any]] = {
    "message_id": {"message_id": {"type": "string", "minLength": 1, "pattern": ID_PATTERN}},
    "artifact_id": {
        "artifact_id": {"type": "string", "minLength": 1, "pattern": ID_PATTERN},
        "offset": {"type": "integer", "minimum": 0, "default": 0},
        "length": {"type": "integer", "minimum": 1, "maximum": MAX_SLICE, "default": 8_000},
    },
    "query": {
        "query": {"type": "string", "minLength": 1, "maxLength": 500, "pattern": QUERY_PATTERN},
        "limit": {"type": "integer", "minimum": 1, "maximum": 50, "default": 10},
    },
}

_SELECTOR = {
    "name": "selector",
    "in": "query",
    "required": True,
    "style": "form",
    "explode": True,
    "description": "exactly one of: message_id; artifact_id with offset and length; query "
    "with limit (as query parameters of these names)",
    "schema": {
        "oneOf": [
            {
                "type": "object",
                "properties": properties,
                "required": [key],
                "additionalProperties": False,
            }
            for key, properties in _SELECTORS.items()
        ]
    },
}
"""The OpenAPI form of the evidence parameters: one object whose keys are the query
parameters, one of three shapes (FastAPI cannot say "exactly one of" of plain ones)."""


def _hidden(**constraints: Any) -> Any:
    """A query parameter left out of the OpenAPI document (``_SELECTOR`` says it)."""
    return Query(include_in_schema=False, **constraints)


def _check_selector(given: set[str]) -> None:
    """Exactly one selector, and only the parameters that go with it."""
    chosen = [key for key in _SELECTORS if key in given]
    allowed = set(_SELECTORS[chosen[0]]) if len(chosen) == 1 else set()
    if len(chosen) != 1 or not given <= allowed:
        raise ApiError(
            "give exactly one of message_id, artifact_id (with offset, length) or query "
            "(with limit), and no other parameter",
            status=422,
            code="invalid_request",
            given=sorted(given),
        )


async def _lookup(
    store: Any,
    session_id: str,
    asked: tuple[str | None, str | None, str | None],
    window: tuple[int, int],
    limit: int,
) -> dict[str, Any]:
    message_id, artifact_id, query = asked  # exactly one (see _check_selector)
    if message_id is not None:
        sm = await find_message(store, session_id, message_id)
        if sm is None:
            raise _missing(f"message {message_id!r} is not in this session's history")
        expiry = (await expiries_of(store, session_id)).get(message_id)
        return {"message": message_json(sm, expiry)}
    if artifact_id is not None:
        got = await find_artifact(store, session_id, artifact_id, *window)
        if isinstance(got, str):
            raise _missing(got)
        if isinstance(got, ExpiredSource):  # the content is gone: say so, serve nothing
            return {
                "artifact_id": artifact_id,
                "from_message_id": got.expiry.message_id,
                "content": None,
                "expired": expiry_json(got.expiry),
            }
        return {
            "artifact_id": got.artifact_id,
            "from_message_id": got.owner.message.id,
            "offset": got.offset,
            "end": got.end,
            "size": got.size,
            "content": got.text,
        }
    assert query is not None
    facts, hits = await search(store, session_id, query, limit)
    return {"facts": facts, "messages": [message_json(sm) for sm in hits]}


def _missing(what: str) -> EvidenceMissingError:
    return EvidenceMissingError(f"missing: {what}; do not assume what it said", missing=True)
