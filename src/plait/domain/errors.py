"""One error hierarchy, rooted in :class:`PlaitError`, split by who must act.

Every error carries a stable ``code`` (used in ``--json`` output and HTTP bodies), a
human-readable message and a dict of ``details`` (plain JSON values). Errors pickle, so
worker processes can pass them on: every subclass is built as ``Cls(message, **details)``.
"""

from __future__ import annotations

from typing import Any, ClassVar

__all__ = [
    "ApprovalNotFoundError",
    "ApprovalRefusedError",
    "ArtifactNotFoundError",
    "BudgetExhaustedError",
    "CompactionError",
    "ConfigError",
    "ConflictError",
    "ContextBudgetInsufficientError",
    "CorruptStoreError",
    "EvidenceMissingError",
    "InvalidCutPointError",
    "InvalidModelOutputError",
    "LeaseLostError",
    "MessageNotFoundError",
    "ModelError",
    "ModelErrorCode",
    "ModelTimeoutError",
    "NotFoundError",
    "PlaitError",
    "PolicyError",
    "RunNotFoundError",
    "RunStateError",
    "ScriptError",
    "SessionBusyError",
    "SessionNotFoundError",
    "StoreError",
    "StoreNotFoundError",
    "StoreUnavailableError",
    "SubAgentWaitingError",
    "SummaryConflictError",
    "SummaryInvalidError",
    "TokenMeterModelUnconfiguredError",
    "ToolError",
    "ValidationError",
    "WebhookNotFoundError",
]


def _rebuild(cls: type[PlaitError], message: str, details: dict[str, Any]) -> PlaitError:
    return cls(message, **details)


class PlaitError(Exception):
    """Base of every error plait raises on purpose."""

    code: ClassVar[str] = "error"

    def __init__(self, message: str, **details: Any) -> None:
        super().__init__(message)
        self.message = message
        self.details = details

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (type(self), self.message, self.details))

    def to_dict(self) -> dict[str, Any]:
        """The JSON shape used by the CLI and the HTTP API."""
        return {"code": self.code, "message": self.message, "details": self.details}


# --- the caller must fix their input or configuration -------------------------------------


class ConfigError(PlaitError):
    """Configuration or misuse: a bad model spec, store URL, budget, workspace, ..."""

    code = "config_error"


class ValidationError(ConfigError):
    """A domain value was built with invalid data."""

    code = "invalid_value"


class ScriptError(ConfigError):
    """A scripted-model file is malformed or the script ran out of turns."""

    code = "script_error"


class InvalidCutPointError(ConfigError):
    """A fork (or compaction boundary) was asked for at a position that does not end a
    complete unit (a tool call without all of its results). ``details`` names the nearest
    valid points before and after (``before``/``after``: message ids or ``None``)."""

    code = "invalid_cut_point"


class RunStateError(ConfigError):
    """The operation does not fit the run's current status (e.g. resuming a finished run)."""

    code = "run_state"


# --- the store: not found, conflicts, corruption -------------------------------------------


class StoreError(PlaitError):
    code = "store_error"


class NotFoundError(StoreError):
    code = "not_found"


class SessionNotFoundError(NotFoundError):
    code = "session_not_found"


class RunNotFoundError(NotFoundError):
    code = "run_not_found"


class ApprovalNotFoundError(NotFoundError):
    code = "approval_not_found"


class MessageNotFoundError(NotFoundError):
    code = "message_not_found"


class ArtifactNotFoundError(NotFoundError):
    code = "artifact_not_found"


class EvidenceMissingError(NotFoundError):
    """A recalled source (message, artifact) is not in the session's branch, or its
    content is no longer stored: reported as missing, never re-invented."""

    code = "evidence_missing"


class StoreNotFoundError(NotFoundError):
    """A command that only reads was pointed at a store that does not exist."""

    code = "store_not_found"


class ConflictError(StoreError):
    """A concurrent writer won: expected version mismatch, duplicate id, key reuse."""

    code = "conflict"


class SessionBusyError(ConflictError):
    """The session already has an active run; a second run would interleave its history."""

    code = "session_busy"


class LeaseLostError(ConflictError):
    """Another owner took over this run's lease; this process must stop writing for it."""

    code = "lease_lost"


class SummaryConflictError(ConflictError):
    """A summary was not activated: the session's summary generation moved on since the
    compaction started, or the active summary already covers at least as long a prefix."""

    code = "summary_conflict"


class StoreUnavailableError(StoreError):
    """The store cannot commit for now: its server is unreachable or restarting, a
    pooled connection died, its disk is full or failing. Nothing was written by the
    operation that raised it (or, for a commit whose answer was lost, the run's lease
    rules decide). Transient: retry later; workers back off and go on claiming."""

    code = "store_unavailable"


class CorruptStoreError(StoreError):
    """Stored data could not be decoded; nothing was changed."""

    code = "corrupt_store"


# --- the model ------------------------------------------------------------------------------


class ModelErrorCode:
    """Normalized provider error codes (docs/design.md#models)."""

    CONTEXT_WINDOW_EXCEEDED = "CONTEXT_WINDOW_EXCEEDED"
    RATE_LIMITED = "RATE_LIMITED"
    AUTHENTICATION = "AUTHENTICATION"
    TRANSIENT = "TRANSIENT"
    INVALID_REQUEST = "INVALID_REQUEST"
    ALL: ClassVar[frozenset[str]] = frozenset(
        {CONTEXT_WINDOW_EXCEEDED, RATE_LIMITED, AUTHENTICATION, TRANSIENT, INVALID_REQUEST}
    )


class ModelError(PlaitError):
    """A model call failed. ``details`` holds ``model_code`` (normalized), and where known
    ``status`` (HTTP status) and ``body`` (the provider's error body)."""

    code = "model_error"

    @property
    def model_code(self) -> str:
        return str(self.details.get("model_code", ModelErrorCode.TRANSIENT))

    @property
    def retry_after(self) -> float | None:
        """Seconds the provider asked us to wait before retrying, if it said."""
        value = self.details.get("retry_after")
        return float(value) if isinstance(value, int | float) else None


class ModelTimeoutError(ModelError):
    """The model server sent nothing for the call's idle timeout (a server that accepted
    the connection and went silent). The attempt is abandoned; its ``model_code`` is
    ``TRANSIENT``, so it is retried like any transient failure, and a run whose retries
    all timed out ends ``failed`` with this code."""

    code = "model_timeout"


class InvalidModelOutputError(PlaitError):
    """The model's output stayed invalid after the allowed correction attempts."""

    code = "invalid_model_output"


class BudgetExhaustedError(PlaitError):
    code = "budget_exhausted"


# --- tools and policy -----------------------------------------------------------------------


class ToolError(PlaitError):
    """Raised by a tool to report a failure the model should see (bad path, no match, ...)."""

    code = "tool_error"


class PolicyError(PlaitError):
    code = "policy_error"


class SubAgentWaitingError(PlaitError):
    """A delegation's child run waits for a person (an approval): the parent's call
    cannot settle yet, so the parent run waits too (it goes on once the child ends)."""

    code = "subagent_waiting"


class ApprovalRefusedError(PolicyError):
    """An approval does not authorize the call that tried to use it (other arguments,
    session or call, expired, already consumed, not approved)."""

    code = "approval_refused"


# --- compaction -----------------------------------------------------------------------------


class TokenMeterModelUnconfiguredError(ConfigError):
    """No token meter or context window is configured for the model that must be measured
    (the RFC's ``TOKEN_METER_MODEL_UNCONFIGURED``). plait never guesses a window."""

    code = "token_meter_model_unconfigured"


class ContextBudgetInsufficientError(PlaitError):
    """The context of the next model call measures over the model's window even after
    compaction, and the raw history does not fit either: the request is not sent (a run
    ends ``failed`` with this code)."""

    code = "context_budget_insufficient"


class CompactionError(PlaitError):
    """A compaction could not produce a usable summary; the previous one stays active and
    the raw history is untouched."""

    code = "compaction_failed"


class SummaryInvalidError(CompactionError):
    """A summary failed validation (schema, source ids outside the covered prefix, not
    smaller than its source) and was not activated."""

    code = "summary_invalid"


class WebhookNotFoundError(NotFoundError):
    """No webhook endpoint with that id (or not one of the caller's)."""

    code = "webhook_not_found"
