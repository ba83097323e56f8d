"""``plait tools list`` (every tool a session would offer: source, effect class, policy
decision) and ``plait mcp check NAME`` (start one configured MCP server and list its
tools)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any, Protocol

from plait.domain.errors import ConfigError

__all__ = ["COMMANDS", "register"]

EXIT_OK = 0


class _Output(Protocol):
    json: bool

    def emit(self, data: Any, text: str | Callable[[], str]) -> None: ...


def register(
    sub: Any,
    common: Callable[[argparse.ArgumentParser], None],
    policy_opt: Callable[[argparse.ArgumentParser], None],
) -> None:
    tools = sub.add_parser("tools", help="the tools a session would offer")
    tsub = tools.add_subparsers(dest="tools_command", required=True, metavar="ACTION")
    lst = tsub.add_parser(
        "list", help="every tool with its source, effect class and the policy's decision"
    )
    policy_opt(lst)
    common(lst)
    mcp = sub.add_parser("mcp", help="MCP servers configured in plait.toml")
    msub = mcp.add_subparsers(dest="mcp_command", required=True, metavar="ACTION")
    check = msub.add_parser("check", help="start server NAME, list its tools, stop it")
    check.add_argument("name", metavar="NAME", help="a [mcp.servers.NAME] of plait.toml")
    common(check)


def tools_list(args: argparse.Namespace, out: _Output) -> int:
    # lazy: plait.runtime loads the application layer (~50 ms); --help does not need it
    from plait.runtime import offered_tools

    rows = offered_tools(db=getattr(args, "db", None), policy=getattr(args, "policy", None))

    def text() -> str:
        header = f"{'TOOL':<48} {'SOURCE':<16} {'EFFECT':<12} DECISION"
        lines = [
            f"{r['name']:<48} {r['source']:<16} {r['effect']:<12} {r['decision']} ({r['rule']}"
            + ("; per call)" if r["per_call"] else ")")
            for r in rows
        ]
        return "\n".join([header, *lines])

    out.emit({"tools": rows}, text)
    return EXIT_OK


def mcp_check(args: argparse.Namespace, out: _Output) -> int:
    # lazy: the MCP client SDK and the runtime are heavy; only mcp commands need them
    from plait.adapters.mcp import McpManager, list_mcp_tools, servers_from_mapping
    from plait.runtime import configured_sandbox
    from plait.settings import resolve_settings

    settings = resolve_settings()
    servers = servers_from_mapping(settings.config.mcp)
    if args.name not in servers:
        known = ", ".join(sorted(servers)) or "none"
        raise ConfigError(
            f"no MCP server {args.name!r} in plait.toml ([mcp.servers.NAME]; configured: {known})"
        )
    config = servers[args.name]
    manager = McpManager(
        {args.name: config}, sandbox=configured_sandbox(settings), environ=settings.environ
    )
    try:
        infos = list_mcp_tools(manager)
    finally:
        manager.close()
    rows = [
        {
            "name": i.spec.name,
            "server_name": i.remote_name,
            "effect": i.spec.effect.value,
            "effect_from": i.effect_source,
            "destructive": i.destructive,
            "description": i.spec.description,
        }
        for i in infos
    ]
    where = "sandboxed" if config.command is not None and config.sandbox else config.transport
    if config.command is not None and not config.sandbox:
        where = "OUTSIDE the sandbox"

    def text() -> str:
        head = f"MCP server {args.name!r}: ok, {len(rows)} tools ({where})"
        lines = [
            f"  {r['name']:<48} {r['effect']:<12}{' destructive' if r['destructive'] else ''}"
            for r in rows
        ]
        return "\n".join([head, *lines])

    out.emit({"server": args.name, "ok": True, "transport": config.transport, "tools": rows}, text)
    return EXIT_OK


COMMANDS: dict[tuple[str, ...], Callable[[argparse.Namespace, Any], int]] = {
    ("tools", "list"): tools_list,
    ("mcp", "check"): mcp_check,
}
