"""A worker process for the SIGSTOP fencing test (run with ``python -m``).

``python -m tests.crash.fence_worker URL DIR LEASE``: drives queued runs of the store at
URL (``sqlite:///…`` or ``postgresql://…``) until SIGTERM, with a lease of LEASE seconds.
The model calls the side-effecting ``deploy`` tool once, then answers. ``deploy`` appends
a line to ``DIR/effects`` (the effect), touches ``DIR/in-tool``, and waits until the file
``DIR/go`` exists, so the test can stop this process while it is inside the effect.
Warnings go to stderr.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
from pathlib import Path

from plait.adapters.stores import open_store
from plait.adapters.stores.postgres.store import PostgresStore
from plait.adapters.stores.sqlite.store import SqliteStore
from plait.adapters.system import RandomIds, SystemClock, process_owner
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
        return ModelResponse(text="deployed")
    call = RawToolCall(id="c1", name="deploy", arguments={})
    return ModelResponse(text="", tool_calls=(call,))


async def main(url: str, where: Path, lease: float) -> None:
    async def deploy(invocation: ToolInvocation) -> ToolOutput:
        with (where / "effects").open("a") as f:
            f.write(invocation.run_id + "\n")
        (where / "in-tool").touch()
        while not (where / "go").exists():  # noqa: ASYNC110 - a file
            await asyncio.sleep(0.01)
        return ToolOutput(content="deployed")

    spec = ToolSpec(
        name="deploy", description="Deploy.", parameters={"type": "object"},
        effect=EffectClass.SIDE_EFFECT,
    )  # fmt: skip
    store = open_store(url, create=False)
    assert isinstance(store, SqliteStore | PostgresStore)
    rt = Runtime(
        store=store, artifacts=store, model=FunctionModel(model, name="fenced"),
        tools=[Tool(spec=spec, execute=deploy, stoppable=False)], clock=SystemClock(),
        ids=RandomIds(), owner=process_owner(), lease_seconds=lease,
    )  # fmt: skip
    worker = Worker(service=rt.service, queue=store, encode=encode_event, poll_seconds=0.05)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    try:
        await worker.run(stop)
    finally:
        await rt.close()


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="%(message)s")
    asyncio.run(main(sys.argv[1], Path(sys.argv[2]), float(sys.argv[3])))
