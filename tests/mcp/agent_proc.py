"""An agent process calling one MCP tool of the fault server, for the SIGKILL tests
(``python -m tests.mcp.agent_proc DB WORKSPACE TOOL``). The test kills it mid-call."""

from __future__ import annotations

import asyncio
import os
import sys
from typing import Any

from plait.domain.policy import Action, Policy
from plait.domain.session import Session
from plait.runtime import Runtime
from plait.testing import ScriptedModel
from tests.mcp.conftest import fault_server

POLICY = Policy(other=Action.ALLOW)


def script(tool: str) -> ScriptedModel:
    call: dict[str, Any] = {
        "name": f"mcp__fault__{tool}",
        "arguments": {"seconds": 300},
        "id": "c1",
    }
    return ScriptedModel({"version": 1, "assistant": [{"tool_calls": [call]}, {"text": "done"}]})


def open_runtime(db: str, tool: str) -> Runtime:
    return Runtime.open(
        db=db,
        model=script(tool),
        mcp_servers={"fault": fault_server()},
        policy=POLICY,
        lease_seconds=1.0,
    )


async def main(db: str, workspace: str, tool: str) -> None:
    os.chdir(workspace)
    rt = open_runtime(db, tool)
    try:
        await rt.store.create_session(Session(id="s1", created_at=1.0, workspace=workspace))
        await rt.service.send("s1", "go")
    finally:
        await rt.close()


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:4]))
