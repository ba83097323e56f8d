"""A small MCP server of the project's own, for fault tests: it crashes mid-call, hangs,
floods its output, changes its tool list and returns malformed results on request.

Every call it receives is appended to ``mcp-calls.log`` in its working directory (the
workspace), so tests can show what reached it (and what did not). Run as
``python fault_server.py``: it speaks MCP on stdio (``--http PORT``: streamable HTTP on
127.0.0.1:PORT).
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import sys
from typing import Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ImageContent, ToolAnnotations

LOG = os.environ.get("FAULT_LOG", "mcp-calls.log")
server = MCPServer("plait-fault")


def _log(event: str, **data: Any) -> None:
    with open(LOG, "a", encoding="utf-8") as log:
        log.write(json.dumps({"event": event, **data}) + "\n")
        log.flush()
        os.fsync(log.fileno())


def _lines() -> list[str]:
    try:
        with open(LOG, encoding="utf-8") as log:
            return log.readlines()
    except FileNotFoundError:
        return []


def _meta(ctx: Context) -> dict[str, Any]:
    meta = ctx.request_context.meta
    return dict(meta) if meta else {}


@server.tool(annotations=ToolAnnotations(destructive_hint=True))
def write_note(text: str, ctx: Context) -> str:
    """Append a note (destructive: needs approval under the default policy)."""
    _log("write_note", text=text, meta=_meta(ctx))
    return f"noted: {text}"


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def peek(ctx: Context) -> str:
    """Read-only: say how many calls were logged."""
    _log("peek", meta=_meta(ctx))
    return "peeked"


@server.tool(annotations=ToolAnnotations(destructive_hint=False, idempotent_hint=False))
async def slow_write(seconds: float, ctx: Context) -> str:
    """A side effect that takes ``seconds`` (a crash test kills plait meanwhile)."""
    _log("slow_write_started", meta=_meta(ctx))
    await asyncio.sleep(seconds)
    _log("slow_write_done")
    return "written"


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
async def slow_read(seconds: float) -> str:
    """A read that takes ``seconds`` the first time, no time when repeated."""
    first = not any('"slow_read_started"' in line for line in _lines())
    _log("slow_read_started")
    if first:
        await asyncio.sleep(seconds)
    return "read"


@server.tool(annotations=ToolAnnotations(destructive_hint=False))
def crash() -> str:
    """Exit the process in the middle of the call."""
    _log("crash")
    sys.stdout.flush()
    os._exit(3)


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
async def hang() -> str:
    """Never answer (until cancelled: the cancellation is logged)."""
    _log("hang")
    try:
        await asyncio.sleep(3600)
    except asyncio.CancelledError:
        _log("hang_cancelled")
        raise
    return "woke"


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def flood(size: int) -> str:
    """Return ``size`` bytes of text."""
    return "x" * size


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def bad_image() -> ImageContent:
    """An image whose data is not base64 (a malformed result)."""
    return ImageContent(type="image", data="%%% not base64 %%%", mime_type="image/png")


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def fail() -> str:
    """A tool error (the result has isError set)."""
    raise ToolError("this tool always fails")


@server.tool(annotations=ToolAnnotations(destructive_hint=False, idempotent_hint=True))
async def add_tool(ctx: Context, destructive: bool = False) -> str:
    """Add a tool named ``extra`` (read-only, or destructive) and tell the client its
    tool list changed."""

    def extra() -> str:
        """A tool that appeared later."""
        _log("extra")
        return "extra"

    hints = ToolAnnotations(destructive_hint=True) if destructive else None
    server.add_tool(extra, annotations=hints or ToolAnnotations(read_only_hint=True))
    await ctx.session.send_tool_list_changed()
    return "added"


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def read_path(path: str) -> str:
    """Read a file anywhere (the sandbox decides what exists)."""
    try:
        with open(path, encoding="utf-8") as file:
            return "read: " + file.read()
    except OSError as e:
        return f"error: {type(e).__name__}: {e}"


@server.tool(annotations=ToolAnnotations(destructive_hint=True))
def write_path(path: str, text: str) -> str:
    """Write a file anywhere (the sandbox decides what is writable)."""
    try:
        with open(path, "w", encoding="utf-8") as file:
            file.write(text)
        return "written"
    except OSError as e:
        return f"error: {type(e).__name__}: {e}"


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def connect(host: str, port: int) -> str:
    """Open a TCP connection (the sandbox decides whether there is a network)."""
    try:
        with socket.create_connection((host, port), timeout=5):
            return "connected"
    except OSError as e:
        return f"error: {type(e).__name__}: {e}"


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def auth_header(ctx: Context) -> str:
    """The Authorization header of the HTTP request carrying this call (HTTP only)."""
    headers = ctx.headers or {}
    return str(headers.get("authorization", "none"))


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--http":  # streamable HTTP on a loopback port
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        server.run()
