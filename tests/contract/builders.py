"""Small builders for store tests: sessions, runs, messages and execution records."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from plait.domain.messages import (
    ArtifactRef,
    AssistantMessage,
    ToolCall,
    ToolResult,
    ToolResultMessage,
    ToolStatus,
    Usage,
    UserMessage,
    VendorState,
    argument_digest,
)
from plait.domain.runs import Budget, Lease, Run, RunStatus
from plait.domain.session import ExecutionRecord, ExecutionState, Session
from plait.domain.tools import EffectClass

__all__ = [
    "assistant",
    "execution",
    "lease",
    "mixed_history",
    "new_run",
    "new_session",
    "tool_result",
    "user",
]


def new_session(id: str = "s1", created_at: float = 1_000.0, **kw: Any) -> Session:
    return Session(id=id, created_at=created_at, **kw)


def new_run(id: str = "r1", session_id: str = "s1", started_at: float = 1_001.0, **kw: Any) -> Run:
    kw.setdefault("status", RunStatus.RUNNING)
    kw.setdefault("budget", Budget())
    return Run(id=id, session_id=session_id, started_at=started_at, **kw)


def lease(owner: str = "worker-a", expires_at: float = 2_000.0) -> Lease:
    return Lease(owner=owner, expires_at=expires_at)


def user(id: str, text: str = "hello", run_id: str | None = "r1") -> UserMessage:
    return UserMessage(id=id, text=text, created_at=1_002.5, run_id=run_id)


def assistant(
    id: str, *calls: tuple[str, str, dict[str, Any]], text: str = "", step: int = 1
) -> AssistantMessage:
    return AssistantMessage(
        id=id,
        text=text,
        created_at=1_003.25,
        run_id="r1",
        step=step,
        model="scripted:test",
        tool_calls=tuple(ToolCall.create(id=c, name=n, arguments=a) for c, n, a in calls),
        usage=Usage(input_tokens=12, output_tokens=3),
    )


def tool_result(
    id: str, call_id: str, content: str = "ok", status: ToolStatus = ToolStatus.SUCCEEDED
) -> ToolResultMessage:
    return ToolResultMessage(
        id=id,
        tool_name="read_file",
        created_at=1_004.0,
        run_id="r1",
        step=1,
        result=ToolResult(call_id=call_id, status=status, content=content),
    )


def execution(
    call_id: str,
    *,
    run_id: str = "r1",
    session_id: str = "s1",
    state: ExecutionState = ExecutionState.REQUESTED,
    arguments: str = '{"path":"a.txt"}',
    **kw: Any,
) -> ExecutionRecord:
    return ExecutionRecord(
        session_id=session_id,
        run_id=run_id,
        call_id=call_id,
        tool_name="read_file",
        effect=EffectClass.READ_ONLY,
        args_digest=argument_digest(arguments),
        idempotency_key=f"{session_id}:{run_id}:{call_id}",
        state=state,
        requested_at=1_003.5,
        **kw,
    )


def mixed_history() -> list[UserMessage | AssistantMessage | ToolResultMessage]:
    """Every field of every kind, unicode and empty strings included."""
    rich = AssistantMessage(
        id="m2",
        text="Let me look — 看一看 🔍",
        created_at=1_700_000_000.123456,
        run_id="r1",
        step=1,
        model="openai:gpt-x",
        tool_calls=(
            ToolCall(id="c1", name="read_file", arguments_json='{"path": "src/ä.py"}'),
            ToolCall(id="c2", name="shell", arguments_json='{"cmd":"ls -la","env":{}}'),
        ),
        usage=Usage(input_tokens=1_234, output_tokens=56),
        vendor_state=VendorState(
            vendor="anthropic", version="2024-10", data={"signature": "abc", "n": [1, 2.5]}
        ),
    )
    artifact = ArtifactRef(id="art_x", sha256="0" * 64, size=99_999, media_type="text/x-log")
    return [
        UserMessage(id="m1", text="", created_at=1_700_000_000.0),
        rich,
        ToolResultMessage(
            id="m3",
            tool_name="read_file",
            created_at=1_700_000_001.5,
            run_id="r1",
            step=1,
            result=ToolResult(
                call_id="c1",
                status=ToolStatus.FAILED,
                content='Traceback…\n\t"quoted" \\ \u0000 nul',
                reason="exit 1",
                artifact=artifact,
            ),
        ),
        ToolResultMessage(
            id="m4",
            tool_name="shell",
            created_at=1_700_000_002.0,
            run_id="r1",
            step=1,
            result=ToolResult(call_id="c2", status=ToolStatus.DENIED, reason="no network"),
        ),
        AssistantMessage(id="m5", text="done ✅", created_at=1_700_000_003.0, step=2),
        replace(
            AssistantMessage(id="m6", text="", created_at=1_700_000_004.0),
            vendor_state=VendorState(vendor="openai", version="1", data={}),
        ),
        UserMessage(id="m7", text="𝔘𝔫𝔦𝔠𝔬𝔡𝔢 " * 50, created_at=1_700_000_005.0, run_id=None),
    ]
