"""Checks before a person's answer is applied to a run that waits (resolve, resume), and
the chores of taking over a run whose process died."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import replace

from plait.application.driver import WAITING
from plait.application.ports import LeftoverSweeper, SessionStore
from plait.domain.errors import RunStateError
from plait.domain.messages import ToolResult, ToolResultMessage, ToolStatus
from plait.domain.runs import Run, RunStatus
from plait.domain.session import ExecutionRecord, ExecutionState

__all__ = ["resolution", "resumable", "sweep_leftovers", "unknown_call"]

log = logging.getLogger("plait.agent")


async def unknown_call(
    store: SessionStore, run_id: str, call_id: str
) -> tuple[Run, ExecutionRecord, list[str]]:
    """The run awaiting resolution, its call whose outcome is unknown and the run's other
    calls still unknown (one read of the records); RunStateError naming the unresolved
    calls otherwise."""
    run = await store.get_run(run_id)
    if run.status is not RunStatus.AWAITING_RESOLUTION:
        raise RunStateError(
            f"run {run_id} is {run.status.value}; only a run awaiting resolution can be resolved",
            run_id=run_id,
            status=run.status.value,
        )
    records = await store.get_executions(run_id)
    unknown = _unknown(records)
    if call_id not in unknown:
        raise RunStateError(
            f"call {call_id!r} of run {run_id} has no unknown outcome to resolve; "
            f"unresolved calls: {', '.join(unknown) or 'none'}",
            run_id=run_id,
            call_id=call_id,
        )
    record = next(r for r in records if r.call_id == call_id)
    return run, record, [c for c in unknown if c != call_id]


def _unknown(records: Sequence[ExecutionRecord]) -> list[str]:
    """The calls whose outcome is unknown, by id."""
    return sorted(r.call_id for r in records if r.result_status is ToolStatus.UNKNOWN)


def resolution(
    record: ExecutionRecord,
    status: ToolStatus,
    text: str,
    *,
    message_id: str,
    now: float,
    step: int,
) -> tuple[ToolResultMessage, ExecutionRecord]:
    """The result message a person's resolution gives the model, and the call's record
    settled with it."""
    message = ToolResultMessage(
        id=message_id,
        tool_name=record.tool_name,
        result=ToolResult(call_id=record.call_id, status=status, content=text, reason=text),
        created_at=now,
        run_id=record.run_id,
        step=step,
    )
    settled = replace(
        record, state=ExecutionState.SETTLED, settled_at=now, result_status=status, note=text
    )
    return message, settled


async def resumable(store: SessionStore, run_id: str, *, queued: bool = False) -> Run:
    """The run, if it waits for a person and nothing blocks it any more (no unknown
    outcome left), or (``queued``: no worker can serve the store) is ``queued``, for the
    caller to start; RunStateError saying what to do otherwise."""
    run = await store.get_run(run_id)
    if run.status is RunStatus.QUEUED:
        if queued:
            return run
        raise RunStateError(
            f"run {run_id} is queued: a worker (`plait worker`, `plait serve`) starts it",
            run_id=run_id,
            status=run.status.value,
        )
    if run.status not in WAITING:
        raise RunStateError(
            f"run {run_id} is {run.status.value}; only a run awaiting resolution or "
            "approval can be resumed (use `plait runs recover` for an interrupted "
            "running run)",
            run_id=run_id,
            status=run.status.value,
        )
    unknown = _unknown(await store.get_executions(run_id))
    if unknown:
        raise RunStateError(
            f"run {run_id} still has calls with unknown outcome: {', '.join(unknown)}; "
            "resolve them first",
            run_id=run_id,
            calls=unknown,
        )
    return run


async def sweep_leftovers(
    sweeper: LeftoverSweeper | None, workspace: str | None, run: Run, now: float
) -> None:
    """Remove temporary files the dead process's interrupted writes left behind (only
    those older than its lease's end: a live writer's are newer)."""
    if sweeper is None or workspace is None:
        return
    older_than = run.lease.expires_at if run.lease is not None else now
    try:
        await asyncio.to_thread(sweeper.sweep, workspace, older_than=older_than)
    except OSError as exc:
        log.warning("run %s: could not sweep %s: %s", run.id, workspace, exc)
