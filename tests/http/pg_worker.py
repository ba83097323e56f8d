"""A worker process for the live-event tests (run with ``python -m``).

``python -m tests.http.pg_worker URL GATES``: drives queued runs of the PostgreSQL store at
URL until SIGTERM. The model calls the ``gate`` tool once, then answers; the tool waits
until the file ``GATES/<session id>`` exists, so a test decides when a run may go on.
"""

from __future__ import annotations

import asyncio
import signal
import sys
from pathlib import Path

from plait.adapters.stores.postgres.store import PostgresStore
from plait.adapters.system import RandomIds, SystemClock
from plait.application.ports import (
    ModelRequest,
    ModelResponse,
    RawToolCall,
    Tool,
    ToolInvocation,
    ToolOutput,
)
from plait.application.worker import Worker
from plait.domain.messages import ToolResultMessage
from plait.domain.tools import EffectClass, ToolSpec
from plait.entrypoints.http.events import encode_event
from plait.runtime import Runtime
from plait.testing import FunctionModel


def model(request: ModelRequest) -> ModelResponse:
    if isinstance(request.context.items[-1], ToolResultMessage):
        return ModelResponse(text="through the gate")
    return ModelResponse(text="", tool_calls=(RawToolCall(id="g1", name="gate", arguments={}),))


async def main(url: str, gates: Path) -> None:
    async def gate(invocation: ToolInvocation) -> ToolOutput:
        while not (gates / invocation.session_id).exists():  # noqa: ASYNC110 - a file
            await asyncio.sleep(0.01)
        return ToolOutput(content="open")

    spec = ToolSpec(
        name="gate", description="Wait for the test.", parameters={"type": "object"},
        effect=EffectClass.READ_ONLY,
    )  # fmt: skip
    store = PostgresStore(url)
    rt = Runtime(
        store=store, artifacts=store, model=FunctionModel(model, name="gated"),
        tools=[Tool(spec=spec, execute=gate)], clock=SystemClock(), ids=RandomIds(),
    )  # fmt: skip
    worker = Worker(service=rt.service, queue=store, encode=encode_event, poll_seconds=0.05)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    (gates / "worker-ready").touch()
    try:
        await worker.run(stop)
    finally:
        await rt.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], Path(sys.argv[2])))
