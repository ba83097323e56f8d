"""Command rules are a first filter; the sandbox enforces reach. A command the policy
allows cannot write where the policy denies writes: Runtime.open hands the same policy to
the gate and to the sandbox."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import pytest

from plait.domain.messages import ToolStatus
from plait.domain.policy import Action, Policy, ToolRule
from plait.domain.runs import RunStatus
from plait.runtime import Runtime
from plait.testing import ScriptedModel

POLICY = Policy(
    rules=(
        ToolRule(
            name="shell", action=Action.ALLOW, tools=("run_command",), commands=(("sh", "*"),)
        ),
        ToolRule(
            name="no-deploy",
            action=Action.DENY,
            tools=("write_file", "edit_file", "run_command"),
            paths=("deploy/**",),
            reason="deploy is frozen",
        ),
    )
)


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")
def test_an_allowed_command_still_cannot_write_a_denied_path(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    (ws / "deploy").mkdir(parents=True)
    (ws / "deploy" / "app.yaml").write_text("replicas: 1\n")
    command = "sh -c 'echo replicas: 9 > deploy/app.yaml'"  # the parser cannot see inside
    model = ScriptedModel(
        {
            "version": 1,
            "assistant": [
                {
                    "tool_calls": [
                        {"name": "run_command", "arguments": {"command": command}, "id": "c1"}
                    ]
                },
                {"text": "tried"},
            ],
        }
    )
    rt = Runtime.open(db=f"sqlite:///{tmp_path / 'plait.db'}", model=model, policy=POLICY)

    async def go() -> None:
        from plait.domain.session import Session

        try:
            await rt.store.create_session(Session(id="s1", created_at=1.0, workspace=str(ws)))
            result = await rt.service.send("s1", "scale it")
            assert result.run.status is RunStatus.COMPLETED
            (record,) = await rt.store.get_executions(result.run.id)
            assert (record.decision, record.decided_by) == ("allow", "policy:rules.shell")
            assert record.result_status is ToolStatus.FAILED
        finally:
            await rt.close()

    asyncio.run(go())
    assert (ws / "deploy" / "app.yaml").read_text() == "replicas: 1\n"
