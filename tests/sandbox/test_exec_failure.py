"""A command whose program could not even be started ran nothing: its call is ``failed``,
never ``unknown`` (issue 20: a 135 KB argument hit E2BIG and the call waited for a person
to resolve an effect that never happened)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from plait.adapters.stores.memory.store import MemoryStore
from plait.application.tool_runner import ToolRunner
from plait.domain.messages import ToolStatus
from plait.domain.tools import EffectClass
from tests.sandbox.conftest import invocation, tool


def _run_side_effect(ws: Path, command: str) -> tuple[ToolStatus, str]:
    t = tool()
    result = asyncio.run(
        ToolRunner(MemoryStore()).run(
            t,
            invocation("run_command", ws, command=command),
            EffectClass.SIDE_EFFECT,
            time_limit=30,
            on_cancel=lambda: None,
        )
    )
    return result.status, result.reason or ""


def test_a_command_too_long_to_exec_e2big_is_failed_not_unknown(bwrap: None, ws: Path) -> None:
    """Past the schema's cap (a caller that skipped validation): the typed arguments refuse
    it before anything starts (exec would refuse it with E2BIG)."""
    status, reason = _run_side_effect(ws, "echo " + "x" * 135_000)
    assert status is ToolStatus.FAILED
    assert reason == "invalid arguments: $.command: String should have at most 32000 characters"
    assert "unknown" not in reason
