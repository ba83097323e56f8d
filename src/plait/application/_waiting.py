"""Checks before a person's answer is applied to a run that waits (resolve, resume)."""

from __future__ import annotations

from plait.application.driver import WAITING
from plait.application.ports import SessionStore
from plait.domain.errors import RunStateError
from plait.domain.messages import ToolStatus
from plait.domain.runs import Run, RunStatus
from plait.domain.session import ExecutionRecord

__all__ = ["resumable", "unknown_call"]


async def unknown_call(
    store: SessionStore, run_id: str, call_id: str
) -> tuple[Run, ExecutionRecord]:
    """The run awaiting resolution and its call whose outcome is unknown; RunStateError
    naming the unresolved calls otherwise."""
    run = await store.get_run(run_id)
    if run.status is not RunStatus.AWAITING_RESOLUTION:
        raise RunStateError(
            f"run {run_id} is {run.status.value}; only a run awaiting resolution can be resolved",
            run_id=run_id,
            status=run.status.value,
        )
    records = {r.call_id: r for r in await store.get_executions(run_id)}
    record = records.get(call_id)
    if record is None or record.result_status is not ToolStatus.UNKNOWN:
        unknown = sorted(c for c, r in records.items() if r.result_status is ToolStatus.UNKNOWN)
        raise RunStateError(
            f"call {call_id!r} of run {run_id} has no unknown outcome to resolve; "
            f"unresolved calls: {', '.join(unknown) or 'none'}",
            run_id=run_id,
            call_id=call_id,
        )
    return run, record


async def resumable(store: SessionStore, run_id: str) -> Run:
    """The run, if it waits for a person and nothing blocks it any more (no unknown
    outcome left); RunStateError saying what to do otherwise."""
    run = await store.get_run(run_id)
    if run.status not in WAITING:
        raise RunStateError(
            f"run {run_id} is {run.status.value}; only a run awaiting resolution or "
            "approval can be resumed (use `plait runs recover` for an interrupted "
            "running run)",
            run_id=run_id,
            status=run.status.value,
        )
    unknown = [
        r.call_id
        for r in await store.get_executions(run_id)
        if r.result_status is ToolStatus.UNKNOWN
    ]
    if unknown:
        raise RunStateError(
            f"run {run_id} still has calls with unknown outcome: {', '.join(unknown)}; "
            "resolve them first",
            run_id=run_id,
            calls=unknown,
        )
    return run
