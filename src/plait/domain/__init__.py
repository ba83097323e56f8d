"""The domain: pure values and rules. No I/O, no SDKs, no asyncio, no clock reads."""

from plait.domain.context import Context, Correction
from plait.domain.errors import PlaitError
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
    argument_digest,
)
from plait.domain.runs import Budget, Lease, Run, RunError, RunStatus, RunUsage
from plait.domain.session import (
    ExecutionRecord,
    ExecutionState,
    ForkOrigin,
    Session,
    StoredMessage,
)
from plait.domain.tools import EffectClass, ToolSpec

__all__ = [
    "ArtifactRef",
    "AssistantMessage",
    "Budget",
    "Context",
    "Correction",
    "EffectClass",
    "ExecutionRecord",
    "ExecutionState",
    "ForkOrigin",
    "Lease",
    "Message",
    "PlaitError",
    "Run",
    "RunError",
    "RunStatus",
    "RunUsage",
    "Session",
    "StoredMessage",
    "ToolCall",
    "ToolResult",
    "ToolResultMessage",
    "ToolSpec",
    "ToolStatus",
    "Usage",
    "UserMessage",
    "VendorState",
    "argument_digest",
]
