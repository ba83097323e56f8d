"""An agent process with telemetry configured by plait.toml in its working directory
(``python -m tests.telemetry.traced_proc run|recover DB``), for the continuity tests.

``run`` sends one message whose first step asks for ``read_note`` and then answers; the
tool kills its own process with SIGKILL the first time it runs (mid-tool: the call is
recorded, its result is not). ``recover`` takes the dead process's run over at once
(``force``) and finishes it. Each prints the run as JSON on its last line."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from pathlib import Path

from plait.application.gate import AllowAll
from plait.application.ports import Tool, ToolInvocation, ToolOutput
from plait.domain.tools import EffectClass, ToolSpec
from plait.runtime import Runtime
from plait.testing import ScriptedModel

SCRIPT = {
    "version": 1,
    "assistant": [
        {"tool_calls": [{"id": "c1", "name": "read_note", "arguments": {}}]},
        {"text": "The note says hello."},
    ],
}


def _first_time(marker: Path) -> bool:
    if marker.exists():
        return False
    marker.write_text("killed")
    return True


def note_tool(marker: Path) -> Tool:
    async def read_note(invocation: ToolInvocation) -> ToolOutput:
        if _first_time(marker):
            os.kill(os.getpid(), signal.SIGKILL)
        return ToolOutput(content="hello")

    spec = ToolSpec(
        name="read_note",
        description="Read the note.",
        parameters={"type": "object", "properties": {}},
        effect=EffectClass.READ_ONLY,
    )
    return Tool(spec=spec, execute=read_note)


async def main(command: str, db: str) -> None:
    runtime = Runtime.open(
        db=f"sqlite:///{db}",
        model=ScriptedModel(SCRIPT),
        tools=[note_tool(Path(db + ".killed"))],
        gate=AllowAll(),
    )
    try:
        service = runtime.service
        if command == "run":
            session = await service.create_session()
            Path(db + ".session").write_text(session.id)  # noqa: ASYNC240 - before the run
            result = await service.send(session.id, "What does the note say?")
            run = result.run
        else:
            session_id = Path(db + ".session").read_text()  # noqa: ASYNC240 - before the run
            (stale,) = await runtime.store.list_runs(session_id=session_id)
            (_report,) = await service.recover(run_id=stale.id, force=True)
            run = await service.get_run(stale.id)
        print(json.dumps({"run": run.id, "status": run.status.value, "trace": run.trace_context}))
    finally:
        await runtime.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
