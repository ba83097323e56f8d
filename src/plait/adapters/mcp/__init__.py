"""MCP client: tools of Model Context Protocol servers as plait tools (README: MCP
servers). Servers are configured in ``[mcp.servers.NAME]`` tables of plait.toml."""

from __future__ import annotations

from plait.adapters.mcp._client import McpCallLost, McpManager, McpServerError
from plait.adapters.mcp._config import McpServerConfig, servers_from_mapping
from plait.adapters.mcp._convert import IDEMPOTENCY_META_KEY, McpToolInfo, tool_name
from plait.adapters.mcp.tools import (
    McpToolSource,
    destructive_rule,
    list_mcp_tools,
    mcp_tools,
    with_destructive_rule,
)

__all__ = [
    "IDEMPOTENCY_META_KEY",
    "McpCallLost",
    "McpManager",
    "McpServerConfig",
    "McpServerError",
    "McpToolInfo",
    "McpToolSource",
    "destructive_rule",
    "list_mcp_tools",
    "mcp_tools",
    "servers_from_mapping",
    "tool_name",
    "with_destructive_rule",
]
