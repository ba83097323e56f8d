"""With compaction on, the model is given the built-in ``recall`` tool, and governance
treats it as the read-only tool it is (allowed by the policy's read default, no reviewer,
no approval)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from typing import Any

import pytest

from plait.adapters.stores.memory.store import MemoryStore
from plait.application.compaction import RECALL_SPEC
from plait.domain.messages import ToolResultMessage, ToolStatus
from plait.domain.runs import RunStatus
from plait.domain.tools import EffectClass
from plait.runtime import Runtime
from plait.testing import FixedClock, ScriptedModel, SequentialIds, echo_tool
from tests.stores.worker import child_env


def test_the_model_sees_recall_and_the_default_policy_lets_it_read() -> None:
    model = ScriptedModel(
        {
            "version": 1,
            "capabilities": {"context_window": 100_000},
            "assistant": [
                {"tool_calls": [{"name": "recall", "arguments": {"query": "deployment"}}]},
                {"text": "Nothing else was said about it."},
            ],
            "reviewer": [],  # a reviewer call would exhaust the script and fail the run
        }
    )

    async def go() -> None:
        runtime = Runtime.open(db="memory://", model=model)  # built-in tools, default policy
        try:
            assert "recall" in [t.spec.name for t in runtime.tools]
            session = await runtime.service.create_session()
            result = await runtime.service.send(session.id, "Do not touch the deployment.")
            assert result.run.status is RunStatus.COMPLETED, result.run.error
            for request in model.requests:
                assert RECALL_SPEC in request.context.tools
            results = [m for m in result.messages if isinstance(m.message, ToolResultMessage)]
            recalled = results[0].message
            assert isinstance(recalled, ToolResultMessage)
            assert recalled.result.status is ToolStatus.SUCCEEDED
            assert "Do not touch the deployment." in recalled.result.content
            (record,) = await runtime.store.get_executions(result.run.id)
            assert record.effect is EffectClass.READ_ONLY
            assert record.decision == "allow" and record.decided_by == "policy:defaults.read"
        finally:
            await runtime.close()

    asyncio.run(go())


def _runtime(tools: list[Any]) -> Runtime:
    store = MemoryStore()
    return Runtime(
        store=store,
        artifacts=store,
        model=None,
        tools=tools,
        clock=FixedClock(),
        ids=SequentialIds(),
    )


def test_recall_is_added_once_whenever_compaction_is_on() -> None:
    names = [t.spec.name for t in _runtime([echo_tool().tool]).tools]
    assert names == ["echo", "recall"]
    own = _runtime([echo_tool("recall").tool])  # a tool of that name already: kept as given
    assert [t.spec.description for t in own.tools] == [echo_tool().tool.spec.description]


@pytest.mark.slow
def test_a_store_only_runtime_builds_no_tools_and_imports_no_schema_libraries() -> None:
    # Reading sessions must not pay for pydantic (typed tool arguments) or jsonschema.
    code = (
        "import sys\n"
        "from plait.runtime import Runtime\n"
        "rt = Runtime.open(db='memory://', store_only=True)\n"
        "print(rt.tools, 'pydantic' in sys.modules, 'jsonschema' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=child_env(), check=True
    )
    assert out.stdout.strip() == "() False False"
