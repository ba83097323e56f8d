"""Internal errors answer ``500 internal`` in the one JSON error shape, and the
connection lives on.

Why a middleware and not ``app.exception_handler(Exception)``: Starlette runs a handler
for ``Exception`` (or 500) in its outermost ``ServerErrorMiddleware``, which sends the
handler's response and then *re-raises* the exception "so servers can log it". uvicorn
then sees an exception escape the application after a response started and closes the
keep-alive connection. This middleware sits inside that one (a user middleware, outside
the routing's ``ExceptionMiddleware``), answers the request and returns normally, so
nothing escapes. The exception is logged once, as a structured record with the run,
session and approval ids the request named (path parameters, or the error's details).

A failure after the response started cannot be answered any more: it is logged the same
way and re-raised, and the server ends that connection, which is the only honest end of a
half-sent body. (The run event stream does better: it ends itself with an ``error`` event,
see :mod:`plait.entrypoints.http.sse`.)
"""

from __future__ import annotations

import logging
from typing import Any

from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from plait.entrypoints.http._errors import error_body

__all__ = ["InternalErrors", "log_internal", "request_ids"]

log = logging.getLogger("plait.http")

_IDS = ("run_id", "session_id", "approval_id")


def request_ids(scope: Scope, error: BaseException | None = None) -> dict[str, Any]:
    """The ids a request is about (its path parameters, then the error's details), the
    method and the path: the ``extra`` of its log records."""
    details = getattr(error, "details", None)
    found: dict[str, Any] = {"method": scope.get("method"), "path": scope.get("path")}
    for source in (scope.get("path_params") or {}, details if isinstance(details, dict) else {}):
        for key in _IDS:
            value = source.get(key)
            if isinstance(value, str) and key not in found:
                found[key] = value
    return found


def log_internal(scope: Scope, error: BaseException) -> None:
    """One error record with the traceback and the request's ids."""
    extra = request_ids(scope, error) | {"code": getattr(error, "code", "internal")}
    log.error(
        "internal error: %s: %s",
        type(error).__name__,
        error,
        exc_info=(type(error), error, error.__traceback__),
        extra=extra,
    )


def internal_response() -> JSONResponse:
    body = error_body("internal", "the server could not complete the request")
    return JSONResponse(body, status_code=500)


class InternalErrors:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def tracking(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, receive, tracking)
        except Exception as error:
            log_internal(scope, error)
            if started:
                raise
            await internal_response()(scope, receive, send)
