"""``plait approvals list|approve|deny`` and ``plait policy check|explain``."""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Protocol

from plait.adapters.shapes import approval_json
from plait.adapters.system import SystemClock
from plait.domain.errors import ConfigError
from plait.domain.policy import Policy, ToolRule
from plait.domain.tools import EffectClass
from plait.entrypoints.cli import _loop
from plait.entrypoints.cli._options import policy_opt

if TYPE_CHECKING:
    from plait.runtime import Runtime

__all__ = [
    "COMMANDS",
    "parse_ttl",
    "policy_json",
    "register",
]

DEFAULT_TTL = "10m"
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


class _Output(Protocol):
    json: bool

    def emit(self, data: Any, text: str | Callable[[], str]) -> None: ...


def parse_ttl(text: str) -> float:
    """``90``, ``90s``, ``10m``, ``2h``, ``1d`` → seconds."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*", text)
    if not match or float(match.group(1)) <= 0:
        raise ConfigError(
            f"--ttl {text!r} is not a duration; write e.g. 90s, 10m, 2h or 1d", ttl=text
        )
    return float(match.group(1)) * _UNITS[match.group(2) or "s"]


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
    parser: argparse.ArgumentParser, common: Callable[[argparse.ArgumentParser], None], *, who: str
) -> None:
    parser.add_argument("--by", default=None, help=f"who {who} (default: your user name)")
    parser.add_argument(
        "--queue",
        action="store_true",
        help="put the run back in the queue for a worker (`plait worker`, `plait serve`) "
        "instead of continuing it here",
    )
    parser.add_argument(
        "--model",
        default=None,
        help="model to continue with when the run recorded none (default: the run's own "
        "model, else $PLAIT_MODEL)",
    )
    policy_opt(parser)
    common(parser)


# --- shapes ---------------------------------------------------------------------------------


def _rule_json(rule: ToolRule) -> dict[str, Any]:
    return {
        "name": rule.name,
        "action": rule.action.value,
        "tools": list(rule.tools),
        "paths": list(rule.paths),
        "commands": [" ".join(c) for c in rule.commands],
        "reason": rule.reason,
    }


def policy_json(policy: Policy) -> dict[str, Any]:
    rv = policy.reviewer
    return {
        "source": policy.source,
        "defaults": {
            "read": policy.read.value,
            "write": policy.write.value,
            "command": policy.command.value,
            "other": policy.other.value,
            "protected": policy.protected_action.value,
        },
        "protected": list(policy.protected),
        "tools": {
            "command": list(policy.command_tools),
            "path_arguments": list(policy.path_arguments),
        },
        "limits": {
            "max_calls_per_run": policy.limits.max_calls_per_run,
            "max_argument_bytes": policy.limits.max_argument_bytes,
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
        "rules": [_rule_json(r) for r in policy.rules],
    }


def _policy_text(policy: Policy) -> str:
    lines = [
        f"policy {policy.source}: valid",
        f"defaults: read {policy.read.value}, write {policy.write.value}, command "
        f"{policy.command.value}, "
        f"other {policy.other.value}; protected paths ({policy.protected_action.value}): "
        + (", ".join(policy.protected) or "none"),
    ]
    if policy.limits.max_calls_per_run is not None or policy.limits.max_argument_bytes is not None:
        lines.append(
            f"limits: max_calls_per_run {policy.limits.max_calls_per_run}, "
            f"max_argument_bytes {policy.limits.max_argument_bytes}"
        )
    if policy.reviews:
        lines.append(
            f"reviewer: model {policy.reviewer.model or '(the run model)'}, "
            f"max_model_calls {policy.reviewer.max_model_calls}"
        )
    lines.append(f"rules ({len(policy.rules)}):")
    lines.extend(f"  {r.describe()}" for r in policy.rules)
    return "\n".join(lines)


# --- commands -------------------------------------------------------------------------------


def _run(args: argparse.Namespace, fn: Callable[[Runtime], Awaitable[int]]) -> int:
    """Run ``fn`` over a runtime of the existing store (no model, no tools)."""
    # lazy: plait.runtime loads the application layer (~50 ms); --help does not need it
    from plait.runtime import Runtime

    async def go() -> int:
        rt = Runtime.open(db=getattr(args, "db", None), store_only=True)
        try:
            return await fn(rt)
        finally:
            await rt.close()

    return _loop.run(go())


def _now() -> float:
    return SystemClock().now()


def _approvals_list(args: argparse.Namespace, out: _Output) -> int:
    async def go(rt: Runtime) -> int:
        now = _now()
        if args.session_id is not None:  # an unknown id is an error, as everywhere else
            await rt.queries.get_session(args.session_id)
        if args.run_id is not None:
            await rt.queries.get_run(args.run_id)
        found = await rt.queries.list_approvals(session_id=args.session_id, run_id=args.run_id)
        if args.pending:
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

    return _run(args, go)


def _decide(args: argparse.Namespace, out: Any, *, approve: bool) -> int:
    # lazy: approve/deny only (it loads getpass and termios; plait --help does not)
    from plait.entrypoints.cli._decide import decide

    return decide(args, out, approve=approve, ttl=parse_ttl(args.ttl) if approve else None)


def _policy_check(args: argparse.Namespace, out: _Output) -> int:
    # lazy: the policy parser loads tomllib and shlex; only policy commands need it
    from plait.adapters.policy_file import load_policy

    policy = load_policy(args.file)
    out.emit(policy_json(policy), lambda: _policy_text(policy))
    return 0


COMMANDS: dict[tuple[str, ...], Callable[[argparse.Namespace, Any], int]] = {
    ("approvals", "list"): _approvals_list,
    ("approvals", "approve"): lambda args, out: _decide(args, out, approve=True),
    ("approvals", "deny"): lambda args, out: _decide(args, out, approve=False),
    ("policy", "check"): _policy_check,
}


def _explain(options: argparse.Namespace, out: _Output) -> int:
    # lazy: the policy parser and the tools catalogue (~30 ms) are for explain only
    from plait.adapters.policy_file import policy_from
    from plait.application.governance.facts import explain_call
    from plait.settings import resolve_settings

    policy = policy_from(resolve_settings(policy=options.policy).policy)
    try:
        args = json.loads(options.arguments)
    except ValueError as error:
        raise ConfigError(
            f'ARGS_JSON is not JSON ({error}); e.g. \'{{"path": "a.txt"}}\''
        ) from error
    if not isinstance(args, dict):
        raise ConfigError('ARGS_JSON must be a JSON object, e.g. \'{"path": "a.txt"}\'')

    _check_tool_exists(options.tool)

    async def go(rt: Runtime) -> int:
        session = await rt.queries.get_session(options.session_id)
        effect = _effect(options.tool, args)
        # lazy: plait.adapters.tools (~20 ms) is for explain only
        from plait.adapters.tools.probe import FileProbe

        facts, verdict = explain_call(
            policy,
            options.tool,
            args,
            read_only=effect is EffectClass.READ_ONLY,
            workspace=session.workspace,
            calls_so_far=options.calls_so_far,
            probe=FileProbe() if session.workspace else None,
        )
        data = {
            "session_id": session.id,
            "tool": options.tool,
            "effect": effect.value,
            "policy": policy.source,
            "action": verdict.action.value,
            "rule": verdict.rule,
            "reason": verdict.reason,
            "paths": list(facts.paths),
            "outside": list(facts.outside),
            "commands": None
            if facts.command is None
            else [" ".join(c) for c in facts.command.commands],
        }
        out.emit(
            data,
            f"{verdict.action.value} by {verdict.rule}: {verdict.reason}  (policy {policy.source})",
        )
        return 0

    return _run(options, go)


def _effect(tool: str, args: dict[str, Any]) -> Any:
    # lazy: plait.adapters.tools (~20 ms) is for explain only
    from plait.adapters.tools import workspace_tools

    for offered in workspace_tools():
        if offered.spec.name == tool:
            return (
                EffectClass(offered.effect_of(args)) if offered.effect_of else offered.spec.effect
            )
    return EffectClass.SIDE_EFFECT


def _check_tool_exists(tool: str) -> None:
    """``policy explain`` names a tool a session can be offered: a built-in one, a
    sub-agent's ``delegate_NAME``, or one of a configured MCP server's
    (``mcp__SERVER__TOOL``); else a ConfigError naming the tools there are."""
    # lazy: the tools, compaction and the runtime (~50 ms) for policy explain only
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
