"""The web console: pages for the people in the loop, served at ``/``.

The pages are static shells (HTML, CSS and vanilla JavaScript in ``static/``, shipped as
package data; no build step). They hold no data: the script asks for an API key once per
browser session (kept in ``sessionStorage``, never in a cookie) and calls the same ``/v1``
API with ``Authorization: Bearer``, so the API's authentication and ownership checks are
the only ones (a principal sees its own sessions, an admin everyone's). No cookie is
used, so there is no ambient authority a cross-site request could borrow. Every text is
inserted with ``textContent``; the Content-Security-Policy allows only this origin's
script and style.
"""

from __future__ import annotations

from importlib.resources import files

from fastapi import APIRouter
from fastapi.responses import HTMLResponse, Response

from plait.entrypoints.http._errors import ApiError

__all__ = ["PAGES", "console_routes"]

PAGES = {
    "sessions": "Sessions",
    "session": "Session",
    "approvals": "Approvals",
    "unknown": "Unknown outcomes",
    "context": "Context",
}
"""The console's pages (the script renders each) and their titles."""

_STATIC = {"console.js": "text/javascript", "console.css": "text/css"}
_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
        "img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}


def _asset(name: str) -> str:
    return (files(__package__) / "static" / name).read_text(encoding="utf-8")


def _page(page: str) -> HTMLResponse:
    shell = _asset("page.html").replace("{{page}}", page).replace("{{title}}", PAGES[page])
    return HTMLResponse(shell, headers=_HEADERS)


def console_routes() -> APIRouter:
    router = APIRouter(include_in_schema=False)

    @router.get("/")
    async def sessions() -> HTMLResponse:
        return _page("sessions")

    @router.get("/console/approvals")
    async def approvals() -> HTMLResponse:
        return _page("approvals")

    @router.get("/console/unknown")
    async def unknown() -> HTMLResponse:
        return _page("unknown")

    @router.get("/console/sessions/{session_id}")
    async def session(session_id: str) -> HTMLResponse:
        return _page("session")  # the script reads the id from the address

    @router.get("/console/sessions/{session_id}/context")
    async def context(session_id: str) -> HTMLResponse:
        return _page("context")

    @router.get("/console/static/{name}")
    async def static(name: str) -> Response:
        if name not in _STATIC:
            raise ApiError(f"no console asset {name!r}", status=404, code="not_found")
        return Response(_asset(name), media_type=_STATIC[name], headers=_HEADERS)

    return router
