"""MCP server tools as plait tools: same gate, approvals, execution records, timeouts and
output cap as the built-in ones (the runner does not know where a tool comes from)."""

from __future__ import annotations

import dataclasses
import fnmatch
import logging
from collections.abc import Callable, Sequence

from plait.adapters.mcp._client import McpManager
from plait.adapters.mcp._convert import (
    IDEMPOTENCY_META_KEY,
    McpToolInfo,
    describe_result,
    tool_info,
)
from plait.application.ports import ArtifactStore, Tool, ToolInvocation, ToolOutput
from plait.domain.errors import ToolError
from plait.domain.policy import Action, Policy, ToolRule

__all__ = [
    "McpToolSource",
    "destructive_rule",
    "list_mcp_tools",
    "mcp_tools",
    "with_destructive_rule",
]

log = logging.getLogger("plait.mcp")

DESTRUCTIVE_RULE = "mcp.destructive"
_READ_ONLY = "ead-only file system"  # EROFS, as Python, Node and git word it
GIT_READ_ONLY_NOTE = (
    "\n[plait: the workspace's git directories are read-only for MCP servers (their config "
    "and hooks run code on the host), so a tool that writes a repository (add, commit, "
    "checkout, ...) fails; the policy's protect_git = false allows it]"
)


def _executor(manager: McpManager, info: McpToolInfo, artifacts: ArtifactStore | None) -> Tool:
    config = manager.servers[info.server]
    unsandboxed = config.command is not None and not config.sandbox
    guards_git = manager.protect_git and config.command is not None and config.sandbox

    async def save(data: bytes, media_type: str) -> str:
        if artifacts is None:
            raise ToolError("this runtime keeps no artifacts for the MCP server's binary content")
        ref = await artifacts.put_artifact(data, media_type=media_type)
        return ref.id

    async def execute(invocation: ToolInvocation) -> ToolOutput:
        result = await manager.run(
            manager.call_tool(
                info.server,
                info.remote_name,
                invocation.call.arguments(),
                workspace=invocation.workspace,
                meta={IDEMPOTENCY_META_KEY: invocation.idempotency_key},
                time_limit=invocation.time_limit_seconds,
            )
        )
        text = await describe_result(result, save)
        if unsandboxed:
            text = f"[ran outside the sandbox: MCP server {info.server!r}]\n{text}"
        if result.is_error and guards_git and _READ_ONLY in text:
            text += GIT_READ_ONLY_NOTE
        return ToolOutput(content=text, failed=bool(result.is_error))

    return Tool(spec=info.spec, execute=execute)


def list_mcp_tools(
    manager: McpManager, servers: Sequence[str] | None = None
) -> tuple[McpToolInfo, ...]:
    """List every server's tools (starting each server: one clear error naming the
    server that does not start or answer)."""
    infos: list[McpToolInfo] = []
    for name in servers if servers is not None else sorted(manager.servers):
        config = manager.servers[name]
        for listed in manager.run_sync(manager.list_tools(name)):
            infos.append(tool_info(config, listed))
    return _unique(infos)


def _unique(infos: Sequence[McpToolInfo]) -> tuple[McpToolInfo, ...]:
    seen: dict[str, McpToolInfo] = {}
    for info in infos:
        if info.spec.name in seen:
            raise ToolError(
                f"MCP server {info.server!r}: tools {seen[info.spec.name].remote_name!r} and "
                f"{info.remote_name!r} get the same name {info.spec.name!r}"
            )
        seen[info.spec.name] = info
    return tuple(infos)


class McpToolSource:
    """The tools of a tool set (:class:`~plait.application.toolset.ToolSet`) that come
    from MCP servers: a server's list is read again when it said
    ``notifications/tools/list_changed``; ``on_change`` gets the new infos (the runtime
    renews the policy's destructive rule with them)."""

    def __init__(
        self,
        manager: McpManager,
        infos: Sequence[McpToolInfo],
        *,
        artifacts: ArtifactStore | None = None,
        on_change: Callable[[tuple[McpToolInfo, ...]], None] | None = None,
    ) -> None:
        self.manager = manager
        self.artifacts = artifacts
        self._names = frozenset(i.spec.name for i in infos)
        self._server = {i.spec.name: i.server for i in infos}
        self.on_change = on_change
        self._by_server: dict[str, tuple[McpToolInfo, ...]] = {}
        for info in infos:
            self._by_server[info.server] = (*self._by_server.get(info.server, ()), info)

    def owns(self, name: str) -> bool:
        return name in self._names

    def groups(self) -> tuple[str, ...]:
        return tuple(sorted(self.manager.servers))

    def group_of(self, name: str) -> str | None:
        return self._server.get(name)

    def changed(self) -> bool:
        return bool(self.manager.changed_places())

    async def reload(self) -> list[Tool]:
        manager = self.manager
        for server, workspace in manager.changed_places():
            config = manager.servers[server]
            try:
                listed = await manager.run(manager.list_tools(server, workspace))
            except ToolError as exc:  # keep what was offered; the calls report the server
                log.warning("MCP server %r: its new tool list: %s", server, exc.message)
                manager.forget_change(server, workspace)
                continue
            self._by_server[server] = tuple(tool_info(config, t) for t in listed)
        infos = _unique([i for server in sorted(self._by_server) for i in self._by_server[server]])
        if self.on_change is not None:
            self.on_change(infos)
        self._names = frozenset(i.spec.name for i in infos)
        self._server = {i.spec.name: i.server for i in infos}
        return mcp_tools(manager, infos, artifacts=self.artifacts)


def mcp_tools(
    manager: McpManager,
    infos: Sequence[McpToolInfo],
    *,
    artifacts: ArtifactStore | None = None,
) -> list[Tool]:
    """Plait tools calling the listed MCP tools; binary content goes to ``artifacts``."""
    return [_executor(manager, info, artifacts) for info in infos]


def destructive_rule(infos: Sequence[McpToolInfo], policy: Policy) -> ToolRule | None:
    """An ``approve`` rule for the destructive MCP tools no rule of ``policy`` names:
    a rule of the user's (per server like ``mcp__git__*``, or per tool) decides instead."""
    names = [
        i.spec.name
        for i in infos
        if i.destructive and not any(_names(r, i.spec.name) for r in policy.rules)
    ]
    if not names:
        return None
    return ToolRule(
        name=DESTRUCTIVE_RULE,
        action=Action.APPROVE,
        tools=tuple(names),
        reason="the MCP server marks this tool destructive",
    )


def _names(rule: ToolRule, tool: str) -> bool:
    return any(fnmatch.fnmatchcase(tool, pattern) for pattern in rule.tools if pattern != "*")


def with_destructive_rule(policy: Policy, infos: Sequence[McpToolInfo]) -> Policy:
    """``policy`` plus :func:`destructive_rule` (unchanged when there is none)."""
    rule = destructive_rule(infos, policy)
    if rule is None:
        return policy
    return dataclasses.replace(policy, rules=(*policy.rules, rule))
