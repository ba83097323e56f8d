"""A long run in a real process, with no crash hook: the path production takes (a tool
result rides with the next step's commit when the model answers at once). For
``test_kill_anywhere``: ``python -m tests.crash.busy_proc STORE_URL CASE_DIR STEPS``.

Turn ``k`` of the scripted model makes one call ``c<k>``: odd turns ``append_line`` (a side
effect: one line ``line-<k>`` in ``effects.txt``), even turns ``read_config`` (read-only,
logged in ``reads.log``); then it answers. The session id is written to ``session_id``
before the run starts.
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path
from typing import Any

from plait.adapters.stores import Store, open_store
from plait.adapters.system import RandomIds, SystemClock
from plait.application.ports import Tool, ToolInvocation, ToolOutput
from plait.application.service import AgentService
from plait.domain.runs import Budget
from plait.domain.tools import EffectClass
from plait.testing import ScriptedModel
from tests.crash.agent_proc import spec

LEASE_SECONDS = 30.0
"""Long: recovery takes the run over with ``force`` once the process is known dead."""


def script(steps: int) -> dict[str, Any]:
    turns: list[dict[str, Any]] = []
    for k in range(1, steps + 1):
        if k % 2:
            call = {"id": f"c{k}", "name": "append_line", "arguments": {"line": f"line-{k}"}}
        else:
            call = {"id": f"c{k}", "name": "read_config", "arguments": {"name": "config.toml"}}
        turns.append({"text": "", "tool_calls": [call]})
    turns.append({"text": "done"})
    return {"version": 1, "assistant": turns}


def tools(case_dir: Path) -> list[Tool]:
    async def read_config(invocation: ToolInvocation) -> ToolOutput:
        with (case_dir / "reads.log").open("a") as f:
            f.write(f"{os.getpid()} {invocation.call.id}\n")
        assert invocation.workspace is not None
        return ToolOutput(content=(Path(invocation.workspace) / "config.toml").read_text())

    async def append_line(invocation: ToolInvocation) -> ToolOutput:
        line = str(invocation.call.arguments()["line"])
        with (case_dir / "workspace" / "effects.txt").open("a") as f:
            f.write(line + "\n")
        return ToolOutput(content=f"appended {line!r}")

    return [
        Tool(spec=spec("read_config", "name", EffectClass.READ_ONLY, "read"), execute=read_config),
        Tool(
            spec=spec("append_line", "line", EffectClass.SIDE_EFFECT, "append"), execute=append_line
        ),
    ]


def service(store: Store, case_dir: Path, steps: int) -> AgentService:
    return AgentService.build(
        store=store,
        artifacts=store,
        model=ScriptedModel(script(steps)),
        tools=tools(case_dir),
        clock=SystemClock(),
        ids=RandomIds(),
        lease_seconds=LEASE_SECONDS,
        budget=Budget(max_steps=steps + 1, max_model_calls=steps + 1),
    )


async def main(url: str, case_dir: Path, steps: int) -> None:
    store = open_store(url)
    agent = service(store, case_dir, steps)
    session = await agent.create_session(workspace=str(case_dir / "workspace"))
    (case_dir / "session_id").write_text(session.id)
    result = await agent.send(session.id, "go")
    await store.close()
    print(result.run.status.value)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], Path(sys.argv[2]), int(sys.argv[3])))
