"""State of a run in progress, and the small pure helpers of the loop."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from plait.application.events import RunObserver
from plait.application.model_caller import ModelCaller
from plait.application.ports import ModelResponse, TextSink
from plait.domain.errors import (
    BudgetExhaustedError,
    ModelError,
    ModelTimeoutError,
    PlaitError,
)
from plait.domain.messages import Message, ToolCall
from plait.domain.record import record
from plait.domain.runs import Run, RunError, RunStatus, RunUsage
from plait.domain.session import ExecutionRecord, Session, StoredMessage
from plait.domain.text import printable

__all__ = [
    "ActiveRun",
    "RunResult",
    "StopRun",
    "UsageCounters",
    "UsedCallIds",
    "call_ids",
    "idempotency_key",
    "model_failure",
    "pending_calls",
    "render_rejected",
]


def idempotency_key(session_id: str, run_id: str, call_id: str) -> str:
    """Stable key of one execution, handed to tools so a repeat can be deduplicated."""
    raw = f"{session_id}\x1f{run_id}\x1f{call_id}".encode()
    return "idem_" + hashlib.sha256(raw).hexdigest()[:32]


@record
class RunResult:
    run: Run
    messages: tuple[StoredMessage, ...]
    """What this run added to the history, in order (the user message first)."""
    output: Any = None
    """A completed typed run's answer: the validated JSON value, or an instance of the
    pydantic model ``send(output_type=...)`` named (None for an untyped run)."""


@dataclass(slots=True)
class UsageCounters:
    """Mutable usage counters of an active run; frozen into the Run only when committed
    (building a new frozen Run per counter change cost ~10% of a step)."""

    steps: int = 0
    model_calls: int = 0
    corrections: int = 0
    tool_calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0

    @classmethod
    def of(cls, usage: RunUsage) -> UsageCounters:
        return cls(*usage.counts())

    def freeze(self) -> RunUsage:
        return RunUsage(
            steps=self.steps,
            model_calls=self.model_calls,
            corrections=self.corrections,
            tool_calls=self.tool_calls,
            input_tokens=self.input_tokens,
            output_tokens=self.output_tokens,
        )

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens


@dataclass(slots=True)
class ActiveRun:
    """In-process state of a run this service is driving. ``run`` is the state last
    committed; ``usage`` runs ahead of it."""

    run: Run
    usage: UsageCounters
    session: Session
    version: int
    history: list[Message]
    used_call_ids: UsedCallIds
    deadline: float | None
    observer: RunObserver | None
    added: list[StoredMessage] = field(default_factory=list)
    cancel_requested: bool = False
    external_cancel: bool = False
    task: asyncio.Task[object] | None = None
    interruptible: bool = False
    """The task may be cancelled now (a model call, or a stoppable tool, is running)."""
    lease_lost: bool = False
    """The heartbeat could not renew the lease: the next commit stops the run."""
    on_text: TextSink | None = None
    """Streaming sink for the assistant's text (display only)."""
    caller: ModelCaller | None = None
    """The ModelCaller of the model this run was started with, when it is not the
    service's own (recovery and resume open it by the run's model spec)."""


class StopRun(Exception):
    """Internal: end the run (or make it wait) with this status; ``executions`` are
    written in the same commit."""

    def __init__(
        self,
        status: RunStatus,
        code: str,
        message: str,
        executions: tuple[ExecutionRecord, ...] = (),
    ) -> None:
        super().__init__(message)
        self.status = status
        self.error = RunError(code=code, message=message)
        self.executions = executions

    @classmethod
    def budget(cls, limit: str, message: str) -> StopRun:
        """The run spent a budget: ``limit`` names which (``deadline``, ``max_steps``...)."""
        return cls(RunStatus.BUDGET_EXHAUSTED, limit, message)


def pending_calls(history: Sequence[Message], run_id: str) -> list[ToolCall]:
    """Calls of the last assistant message (if it is the run's) without a result."""
    answered: set[str] = set()
    for message in reversed(history):
        if message.kind == "tool_result":
            answered.add(message.result.call_id)
        elif message.kind == "assistant":
            if message.run_id != run_id:
                return []
            return [c for c in message.tool_calls if c.id not in answered]
        else:
            return []
    return []


def call_ids(history: Iterable[Message]) -> set[str]:
    """Ids of every tool call in ``history`` (a plain loop, no generator per message)."""
    ids: set[str] = set()
    add = ids.add
    for message in history:
        if message.kind == "assistant":
            for call in message.tool_calls:
                add(call.id)
    return ids


class UsedCallIds:
    """The call ids a run's model may not use again: those of the history the run was
    activated with and those the run has added since. The history's are collected at the
    first check that needs them (a resumed run whose model calls no tool never walks its
    history: ~60 ns a message, 0.3 ms at 5,000). The history list is kept as it was given;
    the run replaces its history with a new list rather than shortening this one."""

    __slots__ = ("_added", "_history", "_past")

    def __init__(self, history: Sequence[Message]) -> None:
        self._history = history
        self._past: set[str] | None = None
        self._added: set[str] = set()

    def __contains__(self, call_id: object) -> bool:
        if call_id in self._added:
            return True
        past = self._past
        if past is None:
            past = self._past = call_ids(self._history)
            self._history = ()
        return call_id in past

    def update(self, ids: Iterable[str]) -> None:
        """Add the ids of calls the run has just made."""
        self._added.update(ids)


def render_rejected(response: ModelResponse) -> str:
    """The rejected output as the correction quotes it back: NUL characters and lone
    surrogates escaped (the provider's request must encode it), long parts cut."""
    parts = [printable(response.text, _QUOTED)] if response.text else []
    for call in response.tool_calls:
        args = call.arguments if isinstance(call.arguments, str) else repr(call.arguments)
        call_id = None if call.id is None else printable(call.id, _QUOTED)
        name = printable(call.name, _QUOTED)
        parts.append(
            f"[tool call id={call_id!r} name={name!r} arguments={printable(args, _QUOTED)}]"
        )
    return "\n".join(parts)


_QUOTED = 10_000
"""Characters of one part of a rejected output quoted back to the model."""


def model_failure(exc: Exception, role: str, time_limit: float | None) -> StopRun:
    """How a failed model call ends the run: the call's timeout, a spent budget, the
    provider's error code (docs/design.md#models), or an internal error of the client."""
    if isinstance(exc, TimeoutError):
        within = "" if time_limit is None else f" within {time_limit:g} s"
        return StopRun(
            RunStatus.FAILED, "model_timeout", f"the {role} model did not answer{within}"
        )
    if isinstance(exc, BudgetExhaustedError):
        return StopRun.budget(str(exc.details.get("limit", "budget")), exc.message)
    if isinstance(exc, ModelTimeoutError):  # retried as transient, and every retry timed out
        return StopRun(RunStatus.FAILED, exc.code, f"model call failed: {exc.message}")
    if isinstance(exc, ModelError):
        return StopRun(
            RunStatus.FAILED, exc.model_code.lower(), f"model call failed: {exc.message}"
        )
    if isinstance(exc, PlaitError):
        return StopRun(RunStatus.FAILED, exc.code, f"model call failed: {exc.message}")
    return StopRun(
        RunStatus.FAILED, "model_internal_error", f"model call failed: {type(exc).__name__}: {exc}"
    )
