"""Ports: what the application needs from the outside world (docs/architecture.md).

Adapters implement these Protocols; the application never imports a concrete adapter.
Optional abilities are declared as data (capability values), not as methods that raise.

The ports are grouped by what uses them: :mod:`.model` (model clients and token meters),
:mod:`.tools` (tools and their executors), :mod:`.calls` (one call of a tool: its
invocation and output), :mod:`.stores` (the session store, its commits and capabilities,
and what a store may also keep), :mod:`.writes` (what the application hands a store to
write), :mod:`.system` (clock, ids, workspace snapshots,
leftovers, telemetry) and :mod:`.service` (service mode: the run queue, run events,
webhooks, API keys). Every name is importable from this package as well; it is loaded at
its first use (PEP 562), with its group alone, so a process that opens a store and builds
tools does not create the ports of models, of tool calls or of service mode (issue 27
item 4).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from plait.application.ports.calls import ToolInvocation, ToolOutput
    from plait.application.ports.model import (
        ModelCapabilities,
        ModelClient,
        ModelRequest,
        ModelResponse,
        ModelRole,
        RawToolCall,
        TextSink,
        TokenMeter,
    )
    from plait.application.ports.service import (
        CarriedEvents,
        CarriesEvents,
        EventCarrier,
        KeyStore,
        ReservesConnections,
        RunQueue,
        WebhookSender,
        WebhookStore,
    )
    from plait.application.ports.stores import (
        ApprovalInbox,
        ApprovalStore,
        ArtifactStore,
        CommitResult,
        ContextRead,
        ForkableStore,
        ForkStore,
        HistoryRead,
        LeaseStore,
        QueuedCommits,
        RetentionStore,
        RunStore,
        SessionHistory,
        SessionStore,
        StoreCapabilities,
        SummaryStore,
        TokenCountStore,
    )
    from plait.application.ports.system import (
        Clock,
        IdGenerator,
        LeftoverSweeper,
        RunTelemetry,
        WorkspaceSnapshots,
    )
    from plait.application.ports.tools import (
        Tool,
        ToolExecutor,
    )
    from plait.application.ports.writes import Commit, ForkCommit

__all__ = [
    "ApprovalInbox",
    "ApprovalStore",
    "ArtifactStore",
    "CarriedEvents",
    "CarriesEvents",
    "Clock",
    "Commit",
    "CommitResult",
    "ContextRead",
    "EventCarrier",
    "ForkCommit",
    "ForkStore",
    "ForkableStore",
    "HistoryRead",
    "IdGenerator",
    "KeyStore",
    "LeaseStore",
    "LeftoverSweeper",
    "ModelCapabilities",
    "ModelClient",
    "ModelRequest",
    "ModelResponse",
    "ModelRole",
    "QueuedCommits",
    "RawToolCall",
    "ReservesConnections",
    "RetentionStore",
    "RunQueue",
    "RunStore",
    "RunTelemetry",
    "SessionHistory",
    "SessionStore",
    "StoreCapabilities",
    "SummaryStore",
    "TextSink",
    "TokenCountStore",
    "TokenMeter",
    "Tool",
    "ToolExecutor",
    "ToolInvocation",
    "ToolOutput",
    "WebhookSender",
    "WebhookStore",
    "WorkspaceSnapshots",
]

_GROUPS = {
    "model": (
        "ModelCapabilities",
        "ModelClient",
        "ModelRequest",
        "ModelResponse",
        "ModelRole",
        "RawToolCall",
        "TextSink",
        "TokenMeter",
    ),
    "tools": ("Tool", "ToolExecutor"),
    "calls": ("ToolInvocation", "ToolOutput"),
    "writes": ("Commit", "ForkCommit"),
    "stores": (
        "ApprovalInbox",
        "ApprovalStore",
        "ArtifactStore",
        "CommitResult",
        "ContextRead",
        "ForkStore",
        "ForkableStore",
        "HistoryRead",
        "LeaseStore",
        "QueuedCommits",
        "RetentionStore",
        "RunStore",
        "SessionHistory",
        "SessionStore",
        "StoreCapabilities",
        "SummaryStore",
        "TokenCountStore",
    ),
    "system": ("Clock", "IdGenerator", "LeftoverSweeper", "RunTelemetry", "WorkspaceSnapshots"),
    "service": (
        "CarriedEvents",
        "CarriesEvents",
        "EventCarrier",
        "KeyStore",
        "ReservesConnections",
        "RunQueue",
        "WebhookSender",
        "WebhookStore",
    ),
}
_GROUP_OF = {name: group for group, names in _GROUPS.items() for name in names}


if not TYPE_CHECKING:  # type checkers see the imports above: a misspelt name is an error

    def __getattr__(name: str) -> Any:
        group = _GROUP_OF.get(name)
        if group is None:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        # lazy: importlib, and the one group of ports that defines the name
        import importlib

        value = getattr(importlib.import_module(f"{__name__}.{group}"), name)
        globals()[name] = value  # found directly from now on
        return value
