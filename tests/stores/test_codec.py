"""Persisted shapes: every old shape in ``fixtures/`` keeps loading to the same values.

When a shape changes, bump its schema_version, add an upcaster in ``_codec``, keep these
fixtures unchanged and add ``v2_*`` ones beside them.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import shutil
import sqlite3
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from plait.adapters.stores.jsonl.store import JsonlStore
from plait.adapters.stores.shared import codec as _codec
from plait.adapters.stores.sqlite.store import SqliteStore
from plait.application.ports import Commit
from plait.domain.errors import CorruptStoreError
from plait.domain.messages import (
    ArtifactRef,
    AssistantMessage,
    Message,
    ToolCall,
    ToolResult,
    ToolResultMessage,
    ToolStatus,
    Usage,
    UserMessage,
    VendorState,
)
from plait.domain.runs import Budget, Lease, Run, RunError, RunStatus, RunUsage
from plait.domain.session import (
    ExecutionRecord,
    ExecutionState,
    ForkOrigin,
    Session,
    StoredMessage,
)
from tests.contract.builders import execution, mixed_history, new_run, new_session

FIXTURES = Path(__file__).parent / "fixtures"


def _fixture(name: str) -> Any:
    return json.loads((FIXTURES / name).read_text(encoding="utf-8"))


def _settled() -> ExecutionRecord:
    return replace(
        execution("c1", state=ExecutionState.SETTLED),
        reviewed_at=1003.6,
        started_at=1003.7,
        settled_at=1004.0,
        result_status=ToolStatus.FAILED,
        decision_reason="allowed by policy",
        note="exit status 1",
    )


def _without_nul(history: list[Message]) -> list[Message]:
    """SQL text dumps cut strings at NUL, so the SQLite fixture was written without it."""
    m3 = history[2]
    assert isinstance(m3, ToolResultMessage)
    content = m3.result.content.replace("\x00", "")
    return [*history[:2], replace(m3, result=replace(m3.result, content=content)), *history[3:]]


def test_v1_messages() -> None:
    loaded = [_codec.message_from_dict(d) for d in _fixture("v1_messages.json")]
    assert loaded == mixed_history()


def test_v1_session() -> None:
    assert _codec.session_from_dict(_fixture("v1_session.json")) == new_session(
        owner="ana",
        workspace="/ws",
        title="Café",
        fork_origin=ForkOrigin(parent_session_id="p0", fork_point_message_id="m0"),
    )


def test_v1_runs() -> None:
    running = replace(
        new_run(model="openai:gpt-x").with_usage(
            steps=2, model_calls=3, tool_calls=2, input_tokens=1234, output_tokens=56
        ),
        lease=Lease(owner="w1", expires_at=2000.0),
        cancel_requested=True,
    )
    failed = new_run("r0").ended(
        RunStatus.FAILED, 1005.0, RunError(code="model_error", message="boom")
    )
    assert [_codec.run_from_dict(d) for d in _fixture("v1_run.json")] == [running, failed]


def test_v1_executions() -> None:
    loaded = [_codec.execution_from_dict(d) for d in _fixture("v1_execution.json")]
    assert loaded == [execution("c2"), _settled()]


def _final_run() -> Run:
    return replace(new_run(model="m").ended(RunStatus.CANCELLED, 1010.0), cancel_requested=True)


def test_v1_jsonl_store_files(tmp_path: Path) -> None:
    (tmp_path / "sessions").mkdir()
    shutil.copy(FIXTURES / "v1_session.jsonl", tmp_path / "sessions" / "s1.jsonl")
    shutil.copy(FIXTURES / "v1_runs.jsonl", tmp_path / "runs.jsonl")

    async def go() -> None:
        store = JsonlStore(tmp_path)
        history = mixed_history()
        assert await store.read_messages("s1") == [
            StoredMessage(i + 1, m) for i, m in enumerate(history)
        ]
        assert await store.get_session("s1") == new_session(title="Café", version=len(history))
        assert await store.get_run("r1") == _final_run()
        assert await store.get_executions("r1") == [
            _settled(),
            execution("c2", state=ExecutionState.STARTED),
        ]
        # and the old file accepts new writes
        await store.commit(Commit(session_id="s1", expected_version=7))
        await store.close()

    asyncio.run(go())


def test_v1_sqlite_store(tmp_path: Path) -> None:
    path = tmp_path / "plait.db"
    conn = sqlite3.connect(path)
    conn.executescript((FIXTURES / "v1_sqlite.sql").read_text(encoding="utf-8"))
    conn.close()

    async def go() -> None:
        store = SqliteStore(path)
        history = _without_nul(mixed_history())
        assert await store.read_messages("s1") == [
            StoredMessage(i + 1, m) for i, m in enumerate(history)
        ]
        assert await store.get_session("s1") == new_session(title="Café", version=len(history))
        assert await store.get_run("r1") == _final_run()
        assert await store.get_executions("r1") == [
            _settled(),
            execution("c2", state=ExecutionState.STARTED),
        ]
        ref, data = await store.get_artifact("art_e229f9798296a1f02c31e503ee95f410")
        assert (data, ref.media_type) == (b"artifact bytes\n", "text/plain")
        await store.close()

    asyncio.run(go())


def _names(cls: type) -> set[str]:
    """The fields a value is built from (a cache such as ``ToolCall._decoded`` is not)."""
    return {f.name for f in dataclasses.fields(cls) if f.init}


def test_codec_covers_every_field() -> None:
    """A field added to a domain value must be persisted too: update ``_codec`` (and the
    SQLite row builders) when this fails."""
    run = _codec.run_to_dict(new_run())
    assert set(run) - {"schema_version"} == _names(Run)
    assert set(run["budget"]) == _names(Budget)
    assert set(run["usage"]) == _names(RunUsage)
    assert set(_codec.session_to_dict(new_session())) - {"schema_version"} == _names(Session)
    assert set(_codec.execution_to_dict(_settled())) - {"schema_version"} == _names(ExecutionRecord)
    assert _names(UserMessage) == {"id", "text", "created_at", "run_id", "kind"}
    assert _names(AssistantMessage) == {
        "id", "text", "created_at", "tool_calls", "run_id", "step", "model", "usage",
        "vendor_state", "output", "kind",
    }  # fmt: skip
    assert _names(ToolResultMessage) == {
        "id", "tool_name", "result", "created_at", "run_id", "step", "kind"
    }  # fmt: skip
    assert _names(ToolResult) == {"call_id", "status", "content", "reason", "artifact"}
    assert _names(ToolCall) == {"id", "name", "arguments_json"}
    assert _names(Usage) == {
        "input_tokens", "output_tokens", "cached_input_tokens", "reasoning_tokens"
    }  # fmt: skip
    assert _names(VendorState) == {"vendor", "version", "data"}
    assert _names(ArtifactRef) == {"id", "sha256", "size", "media_type"}


def test_round_trips() -> None:
    for m in mixed_history():
        assert _codec.message_from_dict(json.loads(_codec.dumps(_codec.message_to_dict(m)))) == m
    run = replace(new_run(), lease=Lease(owner="w", expires_at=1.5), cancel_requested=True)
    assert _codec.run_from_dict(_codec.run_to_dict(run)) == run
    assert _codec.execution_from_dict(_codec.execution_to_dict(_settled())) == _settled()


def test_fields_added_after_v1_round_trip_and_default_on_old_records() -> None:
    """Issue 6: the run's model spec, absolute deadline and cost ceiling; the gate's
    decision on an execution record. v1 records (above) load with their defaults."""
    run = replace(
        new_run(budget=Budget(max_cost_usd=2.5)),
        model_spec="openai:gpt-x",
        deadline_at=1600.0,
    )
    assert _codec.run_from_dict(json.loads(_codec.dumps(_codec.run_to_dict(run)))) == run
    decided = replace(_settled(), decision="deny", decided_by="policy:no-net")
    assert _codec.execution_from_dict(_codec.execution_to_dict(decided)) == decided
    (old_running, _) = [_codec.run_from_dict(d) for d in _fixture("v1_run.json")]
    assert (old_running.model_spec, old_running.deadline_at) == (None, None)
    assert old_running.budget.max_cost_usd is None
    (old_exec, _) = [_codec.execution_from_dict(d) for d in _fixture("v1_execution.json")]
    assert (old_exec.decision, old_exec.decided_by) == (None, None)


@pytest.mark.parametrize(
    ("version", "match"),
    [
        (2, "newer than this plait"),
        (0, "unknown schema_version"),
        (None, "unknown"),
        ("1", "unknown schema_version"),
    ],
)
def test_unknown_schema_versions_are_refused(version: object, match: str) -> None:
    shape = {**_codec.message_to_dict(mixed_history()[0]), "schema_version": version}
    with pytest.raises(CorruptStoreError, match=match):
        _codec.message_from_dict(shape)


def test_malformed_shapes_are_corrupt() -> None:
    good = _codec.run_to_dict(new_run())
    with pytest.raises(CorruptStoreError, match="malformed"):
        _codec.run_from_dict({k: v for k, v in good.items() if k != "budget"})
    with pytest.raises(CorruptStoreError, match="malformed"):
        _codec.message_from_dict({"schema_version": 1, "kind": "poem", "id": "m"})
    with pytest.raises(CorruptStoreError, match="not a JSON object"):
        _codec.session_from_dict(["s1"])
