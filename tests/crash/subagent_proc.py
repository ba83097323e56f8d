"""A parent agent delegating to a sub-agent, in a real process (``python -m
tests.crash.subagent_proc run|recover DIR``), for the SIGKILL test of sub-agents.

``run`` sends one message over the SQLite store ``DIR/store.db``; the child's tool
``tally`` appends a line to ``DIR/effects.txt``; once the child's tool result is durable,
the child's next model call SIGKILLs the whole process (the parent's, which runs the
child). ``recover`` waits until the leases expired, recovers, and prints (last stdout
line, JSON) the parent call's result, the effect lines and every run's status.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from plait.adapters.stores.sqlite.store import SqliteStore
from plait.adapters.system import RandomIds, SystemClock
from plait.application.ports import ModelRequest, ModelResponse, RawToolCall, ToolInvocation
from plait.domain.messages import ToolResultMessage, UserMessage
from plait.domain.subagents import SubAgent
from plait.domain.tools import EffectClass, ToolSpec
from plait.runtime import Runtime
from plait.testing import FunctionModel, RecordingTool

LEASE_SECONDS = 1.0
COUNTER = SubAgent(
    name="counter", instructions="You are the counter: tally, then answer.", tools=("tally",)
)


def _tally(directory: Path) -> RecordingTool:
    spec = ToolSpec(
        name="tally",
        description="count (appends a line: an effect that must not happen twice)",
        parameters={"type": "object", "properties": {}, "additionalProperties": False},
        effect=EffectClass.SIDE_EFFECT,
    )

    def tally(invocation: ToolInvocation) -> str:
        with (directory / "effects.txt").open("a") as f:
            f.write(invocation.idempotency_key + "\n")
        return "7 things"

    return RecordingTool(spec, fn=tally)


def _model(store: SqliteStore, kill: bool) -> FunctionModel:
    async def answer(request: ModelRequest) -> ModelResponse:
        last = request.context.items[-1]
        if request.context.instructions.startswith("You are the counter"):
            if isinstance(last, UserMessage):
                call = RawToolCall(id="t1", name="tally", arguments={})
                return ModelResponse(tool_calls=(call,))
            assert isinstance(last, ToolResultMessage)
            if kill:  # the tool's result is durable first, then the process dies
                await _until(lambda: _result_saved(store, last))
                os.kill(os.getpid(), signal.SIGKILL)
            return ModelResponse(text=f"counted: {last.result.content}")
        if isinstance(last, UserMessage):
            call = RawToolCall(id="d1", name="delegate_counter", arguments={"task": last.text})
            return ModelResponse(tool_calls=(call,))
        assert isinstance(last, ToolResultMessage)
        return ModelResponse(text=f"the counter says {last.result.content}")

    return FunctionModel(answer, name="fn")


async def _until(check: Callable[[], Awaitable[bool]]) -> None:
    """Poll the store (another process may write it) until ``check`` holds."""
    while True:
        if await check():
            return
        await asyncio.sleep(0.02)


async def _leases_expired(store: SqliteStore) -> bool:
    return all(
        r.lease is None or r.lease.expires_at <= time.time() for r in await store.list_runs()
    )


async def _result_saved(store: SqliteStore, result: ToolResultMessage) -> bool:
    for run in await store.list_runs():
        if run.parent is not None:
            stored = await store.read_messages(run.session_id)
            return any(s.message.id == result.id for s in stored)
    return False


def _runtime(directory: Path, store: SqliteStore, kill: bool) -> Runtime:
    return Runtime(
        store=store,
        artifacts=store,
        model=_model(store, kill),
        tools=[_tally(directory).tool],
        clock=SystemClock(),
        ids=RandomIds(),
        owner=f"proc-{os.getpid()}",
        lease_seconds=LEASE_SECONDS,
        subagents=[COUNTER],
    )


async def _run(directory: Path) -> dict[str, Any]:
    store = SqliteStore(directory / "store.db")
    rt = _runtime(directory, store, kill=True)
    session = await rt.service.create_session()
    (directory / "session_id").write_text(session.id)
    await rt.service.send(session.id, "count the boxes")
    return {"error": "the process was not killed"}


async def _recover(directory: Path) -> dict[str, Any]:
    store = SqliteStore(directory / "store.db")
    rt = _runtime(directory, store, kill=False)
    await _until(lambda: _leases_expired(store))
    reports = await rt.service.recover()
    session_id = (directory / "session_id").read_text()
    results = [
        {
            "call_id": s.message.call_id,
            "status": s.message.result.status.value,
            "content": s.message.result.content,
        }
        for s in await store.read_messages(session_id)
        if isinstance(s.message, ToolResultMessage)
    ]
    runs = await store.list_runs()
    await store.close()
    return {
        "reports": sorted(r.outcome for r in reports),
        "results": results,
        "effects": (directory / "effects.txt").read_text().splitlines(),
        "runs": sorted((r.parent is not None, r.status.value) for r in runs),
    }


def main() -> None:
    command, directory = sys.argv[1], Path(sys.argv[2])
    go = _run if command == "run" else _recover
    print(json.dumps(asyncio.run(go(directory))))


if __name__ == "__main__":
    main()
