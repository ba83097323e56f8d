"""The FastAPI application: routes under ``/v1`` over the application services.

Build it with :func:`create_app` from an :class:`ApiContext` (the composition root,
:func:`plait.entrypoints.http.server.build_context`, makes one from settings). Every route
but health and readiness needs ``Authorization: Bearer <key>``; a session belongs to the
principal that created it, and any other principal (but an admin) gets ``not_found``.
"""

# No ``from __future__ import annotations``: FastAPI reads the route signatures at runtime,
# and the dependency aliases (``Who``) are local to the router builders.
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, cast

from fastapi import APIRouter, Depends, FastAPI, Header, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, StreamingResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from plait.adapters.shapes import message_json, run_json, session_json
from plait.application.event_feed import RunEventFeed
from plait.application.fork import ForkService
from plait.application.ports import RunQueue, SessionStore
from plait.application.readiness import CommitProbe
from plait.application.retention import expiries_of
from plait.application.service import AgentService
from plait.application.subagents import sub_agent_children
from plait.domain.errors import (
    PlaitError,
    SessionNotFoundError,
    StoreUnavailableError,
    ValidationError,
)
from plait.domain.runs import Budget, Run
from plait.domain.session import Session
from plait.domain.text import ID_PATTERN, MAX_ID_LENGTH, id_problem, text_problem
from plait.entrypoints.http import models as api
from plait.entrypoints.http._errors import (
    ApiError,
    error_body,
    http_status_and_body,
    status_and_body,
)
from plait.entrypoints.http._internal import InternalErrors, log_internal, request_ids
from plait.entrypoints.http.approvals import approval_routes
from plait.entrypoints.http.auth import Authenticator, Principal
from plait.entrypoints.http.compaction import compaction_routes, compaction_stage
from plait.entrypoints.http.console import console_routes
from plait.entrypoints.http.inbox import inbox_routes
from plait.entrypoints.http.limits import BodyLimit
from plait.entrypoints.http.sse import event_stream
from plait.entrypoints.http.webhooks import webhook_routes
from plait.entrypoints.http.workspaces import bind_directory, bind_workspace

__all__ = ["ApiContext", "create_app"]

log = logging.getLogger("plait.http")

ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"model": api.ErrorOut, "description": text}
    for code, text in (
        (400, "invalid value"),
        (401, "missing or unknown API key"),
        (403, "not allowed for this principal"),
        (404, "not found (or not yours)"),
        (409, "session busy or conflict"),
        (413, "request body too large"),
        (422, "invalid request"),
        (503, "the store cannot commit for now (store_unavailable): retry later"),
    )
}


@dataclass(slots=True)
class ApiContext:
    store: SessionStore
    queue: RunQueue
    service: AgentService
    auth: Authenticator
    forks: ForkService | None = None
    workspace_root: Path | None = None
    max_body_bytes: int = 1_000_000
    feed: RunEventFeed | None = None
    lifespan_hooks: list[Callable[[], AsyncIterator[None]]] = field(default_factory=list)
    on_close: list[Callable[[], Awaitable[None]]] = field(default_factory=list)


def create_app(ctx: ApiContext) -> FastAPI:
    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        hooks = [asynccontextmanager(hook)() for hook in ctx.lifespan_hooks]
        for hook in hooks:
            await hook.__aenter__()
        try:
            yield
        finally:
            for hook in reversed(hooks):
                await hook.__aexit__(None, None, None)
            for close in ctx.on_close:
                await close()

    app = FastAPI(
        title="plait",
        version="1",
        description="A durable agent backend: sessions, queued runs, live run events.",
        lifespan=lifespan,
        openapi_url="/v1/openapi.json",
        docs_url="/v1/docs",
        redoc_url=None,
        dependencies=[Depends(_plain_parameters)],
    )
    _install_errors(app)
    _document_identifiers(app)
    _document_mcp_servers(app, ctx.service)
    _published_shapes(app)
    app.add_middleware(BodyLimit, max_bytes=ctx.max_body_bytes)
    app.add_middleware(InternalErrors)  # outside BodyLimit: see _internal.py for why
    app.include_router(_ops_routes(ctx), prefix="/v1")
    app.include_router(_session_routes(ctx), prefix="/v1", responses=ERRORS)
    app.include_router(_message_routes(ctx), prefix="/v1", responses=ERRORS)
    if ctx.forks is not None:
        app.include_router(_fork_routes(ctx, ctx.forks), prefix="/v1", responses=ERRORS)
    app.include_router(_run_routes(ctx), prefix="/v1", responses=ERRORS)
    if ctx.store.capabilities.approvals:
        who = _principal_dependency(ctx)
        app.include_router(approval_routes(ctx, who), prefix="/v1", responses=ERRORS)
    if ctx.store.capabilities.approval_inbox:
        routes = inbox_routes(ctx, _principal_dependency(ctx))
        app.include_router(routes, prefix="/v1", responses=ERRORS)
    if (stage := compaction_stage(ctx)) is not None:
        routes = compaction_routes(ctx, stage, _principal_dependency(ctx))
        app.include_router(routes, prefix="/v1", responses=ERRORS)
    if ctx.store.capabilities.webhooks:
        hooks = webhook_routes(ctx, _principal_dependency(ctx))
        app.include_router(hooks, prefix="/v1", responses=ERRORS)
    app.include_router(console_routes())  # the web console at / (pages call /v1)
    return app


def _published_shapes(app: FastAPI) -> None:
    """The document's schemas of the published shapes are those ``plait schema`` prints
    (:func:`~plait.entrypoints.http.models.json_schemas`), published once."""
    plain = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is not None:
            return app.openapi_schema
        document = plain()
        document.setdefault("components", {}).setdefault("schemas", {}).update(api.json_schemas())
        return document

    app.openapi = openapi  # type: ignore[method-assign]


def _document_mcp_servers(app: FastAPI, service: AgentService) -> None:
    """Publish the MCP server names a message may choose (``mcp_servers``) as an enum:
    another name is refused (400 ``invalid_value``)."""
    toolset = service.driver.toolset
    names = list(toolset.groups()) if toolset is not None else []
    plain = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is not None:
            return app.openapi_schema
        document = plain()
        schemas = document.get("components", {}).get("schemas", {})
        field = schemas.get("MessageIn", {}).get("properties", {}).get("mcp_servers", {})
        for option in field.get("anyOf", ()):
            if option.get("type") == "array" and names:
                option.setdefault("items", {})["enum"] = names
            elif option.get("type") == "array":
                option["maxItems"] = 0  # no server to choose: only []
        return document

    app.openapi = openapi  # type: ignore[method-assign]


def _document_identifiers(app: FastAPI) -> None:
    """Publish the identifier rule on every path parameter, so a client (or a fuzzer)
    reading the document knows a control character is refused."""
    plain = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is not None:
            return app.openapi_schema
        document = plain()
        for operations in document.get("paths", {}).values():
            for operation in operations.values():
                for parameter in operation.get("parameters", ()):
                    if parameter.get("in") == "path":
                        parameter.setdefault("schema", {}).update(
                            pattern=ID_PATTERN, minLength=1, maxLength=MAX_ID_LENGTH
                        )
        return document

    app.openapi = openapi  # type: ignore[method-assign]


def _problem(err: Mapping[str, Any], content_type: str | None) -> dict[str, Any]:
    """One validation error as the API says it: where in the request, and what is wrong.
    A body that is not JSON is said so, with the parser's reason and the character it
    stopped at (the framework's own words are "body.8: JSON decode error"); a body the
    framework did not read as JSON, because of its content type, names that type (its
    words: "Input should be a valid dictionary", whatever the body held)."""
    loc = tuple(err.get("loc", ()))
    if err.get("type") == "json_invalid" and len(loc) == 2 and loc[0] == "body":
        reason = (err.get("ctx") or {}).get("error")
        detail = f" ({reason})" if reason else ""
        return {"where": "body", "problem": f"not valid JSON at character {loc[1]}{detail}"}
    if loc == ("body",) and isinstance(err.get("input"), bytes):
        given = "none was given" if content_type is None else f"not {content_type!r}"
        problem = f"must be JSON sent as Content-Type: application/json ({given})"
        return {"where": "body", "problem": problem}
    return {"where": ".".join(str(p) for p in loc), "problem": err.get("msg")}


def _install_errors(app: FastAPI) -> None:
    @app.exception_handler(PlaitError)
    async def plait_error(request: Request, error: PlaitError) -> JSONResponse:
        status, body = status_and_body(error)
        if status == 500:
            log_internal(request.scope, error)
        headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
        if isinstance(error, StoreUnavailableError):
            headers = {"Retry-After": "1"}
            log.warning(
                "store unavailable: %s", error.message, extra=request_ids(request.scope, error)
            )
        return JSONResponse(body, status_code=status, headers=headers)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, error: RequestValidationError) -> JSONResponse:
        content_type = request.headers.get("content-type")
        problems = [_problem(err, content_type) for err in error.errors()]
        text = "; ".join(f"{p['where']}: {p['problem']}" for p in problems[:5])
        return JSONResponse(
            error_body("invalid_request", f"invalid request: {text}", {"problems": problems}),
            status_code=422,
        )

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, error: StarletteHTTPException) -> JSONResponse:
        status, body = http_status_and_body(error.status_code, str(error.detail))
        headers = dict(error.headers or {})
        if status == 405:
            headers["Allow"] = _allowed_methods(app, request)
        return JSONResponse(body, status_code=status, headers=headers or None)


def _allowed_methods(app: FastAPI, request: Request) -> str:
    """Every method some route of this path answers (the router's own 405 names only
    those of the first route it matched, e.g. GET of ``/v1/sessions`` but not POST)."""
    allowed = [
        method
        for method in _METHODS
        if any(
            route.matches({**request.scope, "method": method})[0] is Match.FULL
            for route in app.router.routes
        )
    ]
    return ", ".join(allowed)


_METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")


# --- dependencies ---------------------------------------------------------------------------


async def _plain_parameters(request: Request) -> None:
    """Refuse a path parameter that is no identifier, or a query parameter that is no text
    (a NUL, a control character in an id; see :mod:`plait.domain.text`) before any route
    reads it: ``invalid_request`` naming the parameter."""
    problems = [
        {"loc": ("path", name), "msg": problem, "type": "value_error"}
        for name, value in request.path_params.items()
        if isinstance(value, str) and (problem := id_problem(value)) is not None
    ]
    problems += [
        {"loc": ("query", name), "msg": problem, "type": "value_error"}
        for name, value in request.query_params.multi_items()
        if (problem := text_problem(name) or text_problem(value)) is not None
    ]
    if problems:
        raise RequestValidationError(problems)


def _principal_dependency(ctx: ApiContext) -> Callable[..., Awaitable[Principal]]:
    async def principal(
        authorization: Annotated[str | None, Header(include_in_schema=False)] = None,
    ) -> Principal:
        scheme, _, key = (authorization or "").partition(" ")
        if scheme.lower() != "bearer" or not key.strip():
            raise ApiError(
                "missing API key: send 'Authorization: Bearer <key>' (create one with "
                "`plait keys create`)",
                status=401,
                code="unauthorized",
            )
        found = await ctx.auth.principal(key.strip())
        if found is None:
            raise ApiError("unknown API key", status=401, code="unauthorized")
        return found

    return principal


async def _own_session(ctx: ApiContext, who: Principal, session_id: str) -> Session:
    session = await ctx.store.get_session(session_id)
    if not who.may_see(session):
        raise SessionNotFoundError(f"session {session_id!r} not found", session_id=session_id)
    return session


async def _page_cursor(ctx: ApiContext, who: Principal, before: str) -> None:
    try:
        await _own_session(ctx, who, before)
    except SessionNotFoundError:
        raise SessionNotFoundError(
            f"unknown page cursor before={before!r}: no session of yours has that id; pass "
            "the next_before of a previous page",
            before=before,
        ) from None


async def _own_run(ctx: ApiContext, who: Principal, run_id: str) -> Run:
    run = await ctx.store.get_run(run_id)
    await _own_session(ctx, who, run.session_id)
    return run


# --- routes ---------------------------------------------------------------------------------


def _ops_routes(ctx: ApiContext) -> APIRouter:
    router = APIRouter(tags=["operations"])

    @router.get("/health", response_model=api.HealthOut)
    async def health() -> dict[str, str]:
        """The process is up."""
        return {"status": "ok"}

    @router.get("/ready", response_model=api.HealthOut, responses={503: {"model": api.ErrorOut}})
    async def ready() -> Any:
        """The store can commit (a store without a commit probe: it answers a read)."""
        try:
            if ctx.store.capabilities.commit_probe:
                await cast("CommitProbe", ctx.store).check_writable()
            else:
                await ctx.store.list_sessions(limit=1)
        except PlaitError as error:
            body = error_body("not_ready", f"the store cannot commit now: {error.message}")
            return JSONResponse(body, status_code=503)
        return {"status": "ready"}

    return router


def _session_routes(ctx: ApiContext) -> APIRouter:
    router = APIRouter(tags=["sessions"])
    Who = Annotated[Principal, Depends(_principal_dependency(ctx))]

    @router.post("/sessions", status_code=201, response_model=api.SessionOut)
    async def create_session(body: api.SessionIn, who: Who) -> dict[str, Any]:
        workspace = _workspace(ctx, who, body.workspace)
        session = await ctx.service.create_session(
            workspace=workspace, owner=who.name, title=body.title
        )
        log.info("session created", extra={"session_id": session.id, "principal": who.name})
        return session_json(session)

    @router.get("/sessions", response_model=api.SessionsOut)
    async def list_sessions(
        who: Who,
        limit: Annotated[int, Query(ge=1, le=500)] = 50,
        before: Annotated[str | None, Query(min_length=1, max_length=200)] = None,
        owner: Annotated[str | None, Query(min_length=1, max_length=200)] = None,
    ) -> dict[str, Any]:
        """Your sessions, newest first; the next page is ``?before=<next_before>``. An
        admin sees everyone's, or one principal's with ``?owner=NAME`` (anyone else
        naming another owner is ``forbidden``)."""
        if owner is not None and owner != who.name and not who.admin:
            raise ApiError(
                "only an admin may list another principal's sessions; leave out ?owner= "
                "to list your own",
                status=403,
                code="forbidden",
            )
        if before is not None:
            await _page_cursor(ctx, who, before)
        owner = owner if who.admin else who.name
        found = await ctx.store.list_sessions(limit=limit + 1, owner=owner, before=before)
        more = len(found) > limit
        found = found[:limit]
        return {
            "sessions": [session_json(s) for s in found],
            "next_before": found[-1].id if more else None,
        }

    @router.get("/sessions/{session_id}", response_model=api.SessionOut)
    async def show_session(session_id: str, who: Who) -> dict[str, Any]:
        return session_json(await _own_session(ctx, who, session_id))

    @router.get("/sessions/{session_id}/runs", response_model=api.RunsOut)
    async def list_runs(session_id: str, who: Who) -> dict[str, Any]:
        await _own_session(ctx, who, session_id)
        return {"runs": [run_json(x) for x in await ctx.store.list_runs(session_id=session_id)]}

    @router.get("/sessions/{session_id}/subagents", response_model=api.SubAgentsOut)
    async def list_subagents(session_id: str, who: Who) -> dict[str, Any]:
        """The child runs the session's delegate calls started (its sub-agents), in call
        order; their sessions are the caller's as the parent is."""
        await _own_session(ctx, who, session_id)
        found = await sub_agent_children(ctx.store, session_id)
        return {
            "subagents": [
                {
                    "session_id": c.session_id,
                    "run_id": c.id,
                    "parent_run_id": c.parent.run_id,
                    "call_id": c.parent.call_id,
                    "agent": c.parent.agent,
                    "status": c.status.value,
                }
                for c in found
                if c.parent is not None
            ]
        }

    return router


def _message_routes(ctx: ApiContext) -> APIRouter:
    router = APIRouter(tags=["sessions"])
    Who = Annotated[Principal, Depends(_principal_dependency(ctx))]

    @router.post("/sessions/{session_id}/messages", status_code=202, response_model=api.RunOut)
    async def post_message(session_id: str, body: api.MessageIn, who: Who) -> dict[str, Any]:
        """Store the message and a queued run in one commit; a worker runs it. Follow it
        with GET /v1/runs/{run_id}/events."""
        budget = _budget(ctx, body.budget)
        owner = None if who.admin else who.name  # the store refuses others' as not found
        run = await ctx.service.submit(
            session_id,
            body.text,
            budget=budget,
            owner=owner,
            output_type=body.output_schema,
            mcp_servers=body.mcp_servers,
        )
        log.info("run queued", extra={"run_id": run.id, "session_id": session_id})
        return run_json(run)

    @router.get("/sessions/{session_id}/messages", response_model=api.MessagesOut)
    async def list_messages(
        session_id: str,
        who: Who,
        after: Annotated[int, Query(ge=0, le=2**31 - 1)] = 0,
        limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    ) -> dict[str, Any]:
        """Messages with seq > after, oldest first."""
        await _own_session(ctx, who, session_id)
        page = await ctx.store.read_messages(session_id, after=after, limit=limit + 1)
        more = len(page) > limit
        page = page[:limit]
        expired = await expiries_of(ctx.store, session_id) if page else {}
        return {
            "session_id": session_id,
            "messages": [message_json(s, expired.get(s.message.id)) for s in page],
            "next_after": page[-1].seq if more else None,
        }

    return router


def _fork_routes(ctx: ApiContext, forks: ForkService) -> APIRouter:
    router = APIRouter(tags=["sessions"])
    Who = Annotated[Principal, Depends(_principal_dependency(ctx))]

    @router.post("/sessions/{session_id}/fork", status_code=201, response_model=api.SessionOut)
    async def fork(session_id: str, body: api.ForkIn, who: Who) -> dict[str, Any]:
        """A new session holding this one's history through a message that ends a
        complete unit (else ``invalid_cut_point``); the same request id returns the
        same branch."""
        source = await _own_session(ctx, who, session_id)
        caller = source.owner if who.admin else who.name
        result = await forks.fork_session(
            session_id, body.through_message_id, body.request_id, caller
        )
        return session_json(result.branch)

    return router


def _run_routes(ctx: ApiContext) -> APIRouter:
    router = APIRouter(tags=["runs"])
    Who = Annotated[Principal, Depends(_principal_dependency(ctx))]

    @router.get("/runs/{run_id}", response_model=api.RunOut)
    async def show_run(run_id: str, who: Who) -> dict[str, Any]:
        return run_json(await _own_run(ctx, who, run_id))

    @router.post("/runs/{run_id}/cancel", response_model=api.RunOut)
    async def cancel_run(run_id: str, who: Who) -> dict[str, Any]:
        """Ask the run to stop (a queued one ends at once; a running one at its worker's
        next step). Cancelling an ended run changes nothing."""
        await _own_run(ctx, who, run_id)
        run = await ctx.service.cancel(run_id)
        log.info("run cancel requested", extra={"run_id": run_id, "session_id": run.session_id})
        return run_json(run)

    @router.post("/runs/{run_id}/resolve", response_model=api.RunOut)
    async def resolve_run(run_id: str, body: api.ResolveIn, who: Who) -> dict[str, Any]:
        """Record what you verified about a call whose outcome is unknown (its worker
        died while it ran a side effect); the model reads your note as the call's result.
        Once none of the run's calls is unknown, the run goes back to the queue and a
        worker continues it."""
        await _own_run(ctx, who, run_id)
        run = await ctx.service.resolve(
            run_id, body.call_id, body.status, body.note, by=who.name, queue=True
        )
        log.info("run resolved", extra={"run_id": run_id, "session_id": run.session_id})
        return run_json(run)

    @router.post("/runs/{run_id}/resume", response_model=api.RunOut)
    async def resume_run(run_id: str, who: Who) -> dict[str, Any]:
        """Put a run that waits for a person back in the queue once nothing blocks it any
        more (every unknown call resolved, or its approvals decided), e.g. a run left
        waiting after its resolution; a worker continues it. A queued run is returned as
        it is; any other run is a 409 ``run_state`` saying why."""
        await _own_run(ctx, who, run_id)
        run = await ctx.service.requeue(run_id)
        log.info("run requeued", extra={"run_id": run_id, "session_id": run.session_id})
        return run_json(run)

    @router.get(
        "/runs/{run_id}/events",
        response_class=StreamingResponse,
        responses={200: {"content": {"text/event-stream": {"schema": _SSE_EVENT}}}},
    )
    async def run_events(
        run_id: str,
        who: Who,
        last_event_id: Annotated[str, Header(pattern=r"^[0-9]{0,9}$")] = "",
        after: Annotated[int | None, Query(ge=0, le=2**31 - 1)] = None,
    ) -> StreamingResponse:
        """Server-sent events of the run (``id`` is the event's sequence number). Resume
        with the ``Last-Event-ID`` header (or ``?after=N``); the stream ends after
        ``run_finished``."""
        await _own_run(ctx, who, run_id)
        start = after if after is not None else _last_event_id(last_event_id)
        stream = event_stream(ctx.queue, ctx.store, run_id, start, feed=ctx.feed)
        headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
        return StreamingResponse(stream, media_type="text/event-stream", headers=headers)

    return router


_SSE_EVENT = {
    "type": "object",
    "description": "one server-sent event (OpenAPI 3.1: the schema of each event): `event` "
    "names the run event (run_started, step_started, text_delta, message, "
    "tool_call_requested, decision, tool_started, tool_result, compaction, run_finished) or "
    "`error` (the stream failed: `data` is the error shape, no `id`); `id` is the event's "
    "sequence number; `data` a JSON object",
    "properties": {
        "event": {"type": "string", "minLength": 1},
        "id": {"type": "string", "pattern": "^[0-9]+$"},
        "data": {
            "type": "string",
            "contentMediaType": "application/json",
            "contentSchema": {"type": "object"},
        },
    },
    "required": ["event", "data"],
}


def _last_event_id(value: str) -> int:
    """The header's event number (its pattern admits only up to 9 digits); none: 0."""
    return int(value) if value else 0


def _budget(ctx: ApiContext, given: api.BudgetIn | None) -> Budget | None:
    if given is None:
        return None
    base = ctx.service.budget
    fields = given.model_dump(exclude_none=True)
    return Budget(**{**{f: getattr(base, f) for f in Budget.__dataclass_fields__}, **fields})


def _workspace(ctx: ApiContext, who: Principal, name: str | None) -> str | None:
    if name is None:
        return None
    if name.startswith("/"):
        return bind_directory(name, admin=who.admin)
    if ctx.workspace_root is None:
        raise ValidationError(
            "this server has no workspace root (PLAIT_WORKSPACE_ROOT), so sessions cannot "
            "name a workspace",
            workspace=name,
        )
    return bind_workspace(ctx.workspace_root, principal=who.name, name=name)
