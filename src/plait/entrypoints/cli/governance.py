"""``plait approvals list|approve|deny`` and ``plait policy check|explain``."""

from __future__ import annotations

import argparse
import asyncio
import json
import re
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Protocol

from plait.adapters.shapes import approval_json, iso
from plait.domain.errors import ConfigError
from plait.domain.policy import Policy, ToolRule

if TYPE_CHECKING:
    from plait.domain.governance import Approval
    from plait.domain.session import ExecutionRecord
    from plait.runtime import Runtime

__all__ = [
    "COMMANDS",
    "approval_json",
    "approval_lines",
    "decision_line",
    "parse_ttl",
    "policy_json",
    "policy_opt",
    "register",
]

DEFAULT_TTL = "10m"
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


class _Output(Protocol):
    json: bool

    def emit(self, data: Any, text: str | Callable[[], str]) -> None: ...


def parse_ttl(text: str) -> float:
    """``90``, ``90s``, ``10m``, ``2h``, ``1d`` → seconds."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*", text)
    if not m or float(m.group(1)) <= 0:
        raise ConfigError(
            f"--ttl {text!r} is not a duration; write e.g. 90s, 10m, 2h or 1d", ttl=text
        )
    return float(m.group(1)) * _UNITS[m.group(2) or "s"]


def policy_opt(p: argparse.ArgumentParser) -> None:
    """``--policy FILE`` for the commands that run tool calls."""
    p.add_argument(
        "--policy",
        default=None,
        metavar="FILE",
        help="tool policy file (default: $PLAIT_POLICY, else the built-in policy; "
        "see docs/policy.md)",
    )


def register(sub: Any, common: Callable[[argparse.ArgumentParser], None]) -> None:
    """Add the ``approvals`` and ``policy`` command groups."""
    approvals = sub.add_parser("approvals", help="the calls waiting for a person, and decisions")
    asub = approvals.add_subparsers(dest="approvals_command", required=True, metavar="ACTION")
    lst = asub.add_parser("list", help="list approval requests, newest first")
    lst.add_argument("--session", dest="session_id", metavar="SESSION")
    lst.add_argument("--run", dest="run_id", metavar="RUN")
    lst.add_argument("--pending", action="store_true", help="only those still waiting")
    common(lst)
    ok = asub.add_parser(
        "approve",
        help="approve one waiting call (exactly that call) and continue its run",
        description="Approve one waiting call (exactly that call). Once none of its run's "
        "requests is pending, the run continues here to its end or its next wait, printed "
        "as `plait send` prints a run (exit status as for send); --queue leaves it to a "
        "worker instead.",
    )
    ok.add_argument("approval_id", metavar="ID")
    ok.add_argument(
        "--ttl", default=DEFAULT_TTL, help=f"how long it stays valid (default {DEFAULT_TTL})"
    )
    _decision_opts(ok, common, who="approves")
    no = asub.add_parser(
        "deny",
        help="deny one waiting call and continue its run; the model is told the reason",
        description="Deny one waiting call: it gets a `denied` result with your reason. "
        "Once none of its run's requests is pending, the run continues here (the model "
        "reads the denial) to its end or its next wait; --queue leaves it to a worker.",
    )
    no.add_argument("approval_id", metavar="ID")
    no.add_argument("--reason", required=True, help="why (the model reads it)")
    _decision_opts(no, common, who="denies")

    policy = sub.add_parser("policy", help="check and explain the tool policy")
    psub = policy.add_subparsers(dest="policy_command", required=True, metavar="ACTION")
    check = psub.add_parser("check", help="validate a policy file and print its rules")
    check.add_argument("file", metavar="FILE")
    common(check)
    explain = psub.add_parser("explain", help="say which rule decides a call, and why")
    explain.add_argument("session_id", metavar="SESSION")
    explain.add_argument("tool", metavar="TOOL")
    explain.add_argument("arguments", metavar="ARGS_JSON")
    explain.add_argument(
        "--policy", default=None, help="policy file (default: $PLAIT_POLICY or built-in)"
    )
    explain.add_argument(
        "--calls-so-far", type=int, default=0, help="tool calls the run already made (limits)"
    )
    common(explain)


def _decision_opts(
    p: argparse.ArgumentParser, common: Callable[[argparse.ArgumentParser], None], *, who: str
) -> None:
    p.add_argument("--by", default=None, help=f"who {who} (default: your user name)")
    p.add_argument(
        "--queue",
        action="store_true",
        help="put the run back in the queue for a worker (`plait worker`, `plait serve`) "
        "instead of continuing it here",
    )
    p.add_argument(
        "--model",
        default=None,
        help="model to continue with when the run recorded none (default: the run's own "
        "model, else $PLAIT_MODEL)",
    )
    policy_opt(p)
    common(p)


# --- shapes ---------------------------------------------------------------------------------


def decision_line(e: ExecutionRecord) -> list[str]:
    """``plait runs show``: who decided about a call, when and why."""
    if e.decision is None:
        return []
    return [f"    {e.decision} by {e.decided_by} at {iso(e.reviewed_at)}: {e.decision_reason}"]


def approval_lines(approvals: list[Approval], now: float) -> list[str]:
    lines = []
    for x in approvals:
        who = f" by {x.grantor} at {iso(x.decided_at)}" if x.grantor else ""
        why = f": {x.denial_reason}" if x.denial_reason else ""
        lines.append(f"  approval {x.id}  call {x.call_id}  {x.state(now)}{who}{why}")
    return lines


def _rule_json(r: ToolRule) -> dict[str, Any]:
    return {
        "name": r.name,
        "action": r.action.value,
        "tools": list(r.tools),
        "paths": list(r.paths),
        "commands": [" ".join(c) for c in r.commands],
        "reason": r.reason,
    }


def policy_json(p: Policy) -> dict[str, Any]:
    rv = p.reviewer
    return {
        "source": p.source,
        "defaults": {
            "read": p.read.value,
            "write": p.write.value,
            "command": p.command.value,
            "other": p.other.value,
            "protected": p.protected_action.value,
        },
        "protected": list(p.protected),
        "tools": {"command": list(p.command_tools), "path_arguments": list(p.path_arguments)},
        "limits": {
            "max_calls_per_run": p.limits.max_calls_per_run,
            "max_argument_bytes": p.limits.max_argument_bytes,
        },
        "reviewer": {
            "model": rv.model or None,
            "instructions": rv.instructions,
            "max_model_calls": rv.max_model_calls,
            "max_corrections": rv.max_corrections,
            "timeout_seconds": rv.timeout_seconds,
            "max_output_tokens": rv.max_output_tokens,
            "history_messages": rv.history_messages,
        },
        "rules": [_rule_json(r) for r in p.rules],
    }


def _policy_text(p: Policy) -> str:
    lines = [
        f"policy {p.source}: valid",
        f"defaults: read {p.read.value}, write {p.write.value}, command {p.command.value}, "
        f"other {p.other.value}; protected paths ({p.protected_action.value}): "
        + (", ".join(p.protected) or "none"),
    ]
    if p.limits.max_calls_per_run is not None or p.limits.max_argument_bytes is not None:
        lines.append(
            f"limits: max_calls_per_run {p.limits.max_calls_per_run}, "
            f"max_argument_bytes {p.limits.max_argument_bytes}"
        )
    if p.reviews:
        lines.append(
            f"reviewer: model {p.reviewer.model or '(the run model)'}, "
            f"max_model_calls {p.reviewer.max_model_calls}"
        )
    lines.append(f"rules ({len(p.rules)}):")
    lines.extend(f"  {r.describe()}" for r in p.rules)
    return "\n".join(lines)


# --- commands -------------------------------------------------------------------------------


def _run(a: argparse.Namespace, fn: Callable[[Runtime], Awaitable[int]]) -> int:
    """Run ``fn`` over a runtime of the existing store (no model, no tools)."""
    from plait.runtime import Runtime

    async def go() -> int:
        rt = Runtime.open(db=getattr(a, "db", None), store_only=True)
        try:
            return await fn(rt)
        finally:
            await rt.close()

    return asyncio.run(go())


def _now() -> float:
    from plait.adapters.system import SystemClock

    return SystemClock().now()


def _approvals_list(a: argparse.Namespace, out: _Output) -> int:
    async def go(rt: Runtime) -> int:
        now = _now()
        if a.session_id is not None:  # an unknown id is an error, as everywhere else
            await rt.queries.get_session(a.session_id)
        if a.run_id is not None:
            await rt.queries.get_run(a.run_id)
        found = await rt.queries.list_approvals(session_id=a.session_id, run_id=a.run_id)
        if a.pending:
            found = [x for x in found if x.state(now) == "pending"]

        def text() -> str:
            if not found:
                return "no approval requests"
            return "\n".join(
                f"{x.id}  {x.state(now):8}  {x.tool_name}  run {x.run_id}  call {x.call_id}"
                f"  scope {', '.join(x.scope) or '-'}\n    why: {x.reason}"
                for x in found
            )

        parents = await rt.queries.parents(found)
        out.emit({"approvals": [approval_json(x, now, parents.get(x.run_id)) for x in found]}, text)
        return 0

    return _run(a, go)


def _decide(a: argparse.Namespace, out: Any, *, approve: bool) -> int:
    from plait.entrypoints.cli._decide import decide

    return decide(a, out, approve=approve, ttl=parse_ttl(a.ttl) if approve else None)


def _policy_check(a: argparse.Namespace, out: _Output) -> int:
    from plait.adapters.policy_file import load_policy

    p = load_policy(a.file)
    out.emit(policy_json(p), lambda: _policy_text(p))
    return 0


COMMANDS: dict[tuple[str, ...], Callable[[argparse.Namespace, Any], int]] = {
    ("approvals", "list"): _approvals_list,
    ("approvals", "approve"): lambda a, out: _decide(a, out, approve=True),
    ("approvals", "deny"): lambda a, out: _decide(a, out, approve=False),
    ("policy", "check"): _policy_check,
}


def _explain(a: argparse.Namespace, out: _Output) -> int:
    from plait.adapters.policy_file import policy_from
    from plait.application.governance.facts import explain_call

    policy = policy_from(a.policy)
    try:
        args = json.loads(a.arguments)
    except ValueError as e:
        raise ConfigError(f'ARGS_JSON is not JSON ({e}); e.g. \'{{"path": "a.txt"}}\'') from e
    if not isinstance(args, dict):
        raise ConfigError('ARGS_JSON must be a JSON object, e.g. \'{"path": "a.txt"}\'')

    _check_tool_exists(a.tool)

    async def go(rt: Runtime) -> int:
        session = await rt.queries.get_session(a.session_id)
        effect = _effect(a.tool, args)
        from plait.adapters.tools.probe import FileProbe
        from plait.domain.tools import EffectClass

        facts, v = explain_call(
            policy, a.tool, args, read_only=effect is EffectClass.READ_ONLY,
            workspace=session.workspace, calls_so_far=a.calls_so_far,
            probe=FileProbe() if session.workspace else None,
        )  # fmt: skip
        data = {
            "session_id": session.id,
            "tool": a.tool,
            "effect": effect.value,
            "policy": policy.source,
            "action": v.action.value,
            "rule": v.rule,
            "reason": v.reason,
            "paths": list(facts.paths),
            "outside": list(facts.outside),
            "commands": None
            if facts.command is None
            else [" ".join(c) for c in facts.command.commands],
        }
        out.emit(data, f"{v.action.value} by {v.rule}: {v.reason}  (policy {policy.source})")
        return 0

    return _run(a, go)


def _effect(tool: str, args: dict[str, Any]) -> Any:
    from plait.adapters.tools import workspace_tools
    from plait.domain.tools import EffectClass

    for t in workspace_tools():
        if t.spec.name == tool:
            return EffectClass(t.effect_of(args)) if t.effect_of else t.spec.effect
    return EffectClass.SIDE_EFFECT


def _check_tool_exists(tool: str) -> None:
    """``policy explain`` names a tool a session can be offered: a built-in one, a
    sub-agent's ``delegate_NAME``, or one of a configured MCP server's
    (``mcp__SERVER__TOOL``); else a ConfigError naming the tools there are."""
    from plait.adapters.tools import session_tools
    from plait.application.compaction import RECALL_SPEC
    from plait.runtime import configured_mcp

    builtin = sorted({t.spec.name for t in session_tools()} | {RECALL_SPEC.name, "run_tests"})
    if tool in builtin or tool.startswith("delegate_"):  # delegate_NAME: a sub-agent
        return
    servers = configured_mcp()
    if any(tool.startswith(f"mcp__{name}__") for name in servers):
        return
    mcp = f"; MCP tools are named mcp__SERVER__TOOL (servers: {', '.join(sorted(servers))})"
    raise ConfigError(
        f"tool {tool!r} does not exist: built-in tools are {', '.join(builtin)}"
        + (mcp if servers else " (no MCP server is configured)")
        + "; `plait tools list` shows every tool a session is offered",
        tool=tool,
    )


COMMANDS[("policy", "explain")] = _explain
