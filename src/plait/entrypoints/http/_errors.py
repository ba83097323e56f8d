"""One JSON error shape for every failure: ``{"error": {"code", "message", "details"}}``.

Codes are stable: ``unauthorized``, ``forbidden``, ``not_found`` (also for another
principal's session: it answers as if it did not exist), ``session_busy``, ``conflict``
(and its kinds such as ``lease_lost``), ``invalid_request`` (body or parameters),
``invalid_value``, ``invalid_cut_point``, ``run_state``, ``payload_too_large``,
``method_not_allowed``, ``not_ready``, ``store_unavailable`` (503: the store cannot
commit for now; retry), ``internal`` (logged with the request's ids by the
app, see :mod:`plait.entrypoints.http._internal`)."""

from __future__ import annotations

from typing import Any

from plait.domain.errors import (
    ConfigError,
    ConflictError,
    NotFoundError,
    PlaitError,
    PolicyError,
    RunStateError,
    StoreUnavailableError,
)

__all__ = ["HTTP_CODES", "ApiError", "error_body", "http_status_and_body", "status_and_body"]

HTTP_CODES = {
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    413: "payload_too_large",
}
"""Codes of the answers the HTTP framework itself gives (no route, wrong method, ...)."""


class ApiError(PlaitError):
    """An HTTP-level failure with its status (auth, size, readiness)."""

    code = "api_error"

    def __init__(self, message: str, **details: Any) -> None:
        super().__init__(message, **details)

    @property
    def status(self) -> int:
        return int(self.details.get("status", 400))


def error_body(code: str, message: str, details: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "details": details or {}}}


def http_status_and_body(status: int, detail: str) -> tuple[int, dict[str, Any]]:
    """The answer for a framework-level HTTP error: a body the framework could not parse
    (400, e.g. bytes that are not UTF-8 inside a JSON string) is ``invalid_request`` like
    every other unreadable body (422); other statuses get their documented code."""
    if status == 400:
        return 422, error_body("invalid_request", f"invalid request: {detail}")
    if status >= 500:
        return 500, error_body("internal", "the server could not complete the request")
    return status, error_body(HTTP_CODES.get(status, "invalid_request"), detail)


def _public(details: dict[str, Any]) -> dict[str, Any]:
    """What a client may read of a store error: not where the store lives."""
    return {k: v for k, v in details.items() if k in ("sqlstate", "sqlite_error")}


def status_and_body(error: PlaitError) -> tuple[int, dict[str, Any]]:
    if isinstance(error, ApiError):
        details = {k: v for k, v in error.details.items() if k not in ("status", "code")}
        return error.status, error_body(
            str(error.details.get("code", "error")), error.message, details
        )
    if isinstance(error, StoreUnavailableError):
        text = "the store is unavailable for now; retry later"
        return 503, error_body(error.code, text, _public(error.details))
    if isinstance(error, NotFoundError):
        return 404, error_body("not_found", error.message, error.details)
    if error.code == "invalid_cut_point":
        return 422, error_body(error.code, error.message, error.details)
    if isinstance(error, ConflictError | RunStateError):
        return 409, error_body(error.code, error.message, error.details)
    if isinstance(error, ConfigError):
        return 400, error_body(error.code, error.message, error.details)
    if isinstance(error, PolicyError):
        return 403, error_body("forbidden", error.message, {"reason": error.code, **error.details})
    return 500, error_body("internal", "the server could not complete the request")
