"""Tool adapters: executors for the tools a session can call."""

from plait.adapters.tools.workspace import WorkspaceLimits, workspace_tools

__all__ = ["WorkspaceLimits", "workspace_tools"]
