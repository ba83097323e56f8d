"""The domain: pure values and rules. No I/O, no SDKs, no asyncio, no clock reads.

The names below are loaded at their first use (PEP 562): importing one module of the
package (``plait.domain.errors``, say) does not import the others, so a process loads
only the domain it uses (issue 27 item 4: a default ``Runtime.open`` builds no context)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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

_MODULES = {
    "context": ("Context", "Correction"),
    "errors": ("PlaitError",),
    "messages": (
        "ArtifactRef",
        "AssistantMessage",
        "Message",
        "ToolCall",
        "ToolResult",
        "ToolResultMessage",
        "ToolStatus",
        "Usage",
        "UserMessage",
        "VendorState",
        "argument_digest",
    ),
    "runs": ("Budget", "Lease", "Run", "RunError", "RunStatus", "RunUsage"),
    "session": ("ExecutionRecord", "ExecutionState", "ForkOrigin", "Session", "StoredMessage"),
    "tools": ("EffectClass", "ToolSpec"),
}
_LAZY = {name: module for module, names in _MODULES.items() for name in names}


if not TYPE_CHECKING:  # type checkers see the imports above: a misspelt name is an error

    def __getattr__(name: str) -> Any:
        module = _LAZY.get(name)
        if module is None:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        # lazy: importlib, and the one domain module that defines the name
        import importlib

        return getattr(importlib.import_module(f"{__name__}.{module}"), name)
