"""What the policy knows of a call: its workspace paths (normalized, symlinks resolved
where a probe is given), the sub-commands of a shell command, its size."""

from __future__ import annotations

import posixpath
from typing import Any, Protocol

from plait.application.governance.commands import parse_command
from plait.domain.messages import ToolCall
from plait.domain.policy import CallFacts, ParsedCommand, Policy, PolicyVerdict

__all__ = ["WorkspaceProbe", "call_facts", "explain_call", "relative_path"]

_HARMLESS = frozenset({"/dev/null", "/dev/stdout", "/dev/stderr"})
_DIR_CHANGERS = frozenset({"cd", "pushd", "popd"})


class WorkspaceProbe(Protocol):
    """Looks at the workspace on the gate's behalf (implemented by the tools adapter)."""

    def resolve(self, workspace: str, path: str) -> str | None:
        """``path`` (workspace-relative) with symbolic links resolved, still relative;
        ``None`` if it leads outside the workspace."""
        ...

    def state(self, workspace: str, paths: tuple[str, ...]) -> str | None:
        """A digest of the current content of ``paths`` (``None`` when it cannot be
        taken): an approval is bound to it, so a file that changed needs a new one."""
        ...


def relative_path(raw: str, workspace: str | None) -> str | None:
    """``raw`` as a normalized workspace-relative POSIX path, or ``None`` when it leaves
    the workspace (``..`` above the root, an absolute path elsewhere)."""
    path = raw.replace("\\", "/")
    if path.startswith("/"):
        if workspace is None:
            return None
        root = posixpath.normpath(workspace.replace("\\", "/"))
        path = posixpath.normpath(path)
        if path == root:
            return "."
        if not path.startswith(root.rstrip("/") + "/"):
            return None
        path = path[len(root.rstrip("/")) + 1 :]
    path = posixpath.normpath(path or ".")
    if path == ".." or path.startswith("../"):
        return None
    return path


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [v for v in value if isinstance(v, str)]
    return []


def call_facts(
    policy: Policy,
    call: ToolCall,
    *,
    read_only: bool,
    workspace: str | None,
    calls_so_far: int = 0,
    probe: WorkspaceProbe | None = None,
) -> CallFacts:
    args = call.arguments()
    paths: list[str] = []
    outside: list[str] = []

    def place(raw: str, base: str = ".") -> None:
        rel = relative_path(raw if raw.startswith("/") else posixpath.join(base, raw), workspace)
        if rel is not None and probe is not None and workspace is not None:
            rel = probe.resolve(workspace, rel)
        if rel is None:
            outside.append(raw)
        elif rel not in paths:
            paths.append(rel)

    for name in policy.path_arguments:
        for raw in _strings(args.get(name)):
            place(raw)
    command: ParsedCommand | None = None
    if policy.is_command_tool(call.name):
        raw = args.get("command", "")
        command = (
            parse_command(raw)
            if isinstance(raw, str)
            else ParsedCommand(ok=False, problem="the command is not a string")
        )
        if command.ok:
            base = paths[0] if paths else "."
            command = _placed_writes(command, base, workspace, probe, outside)
    return CallFacts(
        tool=call.name,
        read_only=read_only,
        paths=tuple(paths),
        outside=tuple(outside),
        command=command,
        argument_bytes=len(call.arguments_json.encode()),
        calls_so_far=calls_so_far,
    )


def explain_call(
    policy: Policy,
    tool: str,
    arguments: dict[str, Any],
    *,
    read_only: bool,
    workspace: str | None,
    calls_so_far: int = 0,
    probe: WorkspaceProbe | None = None,
) -> tuple[CallFacts, PolicyVerdict]:
    """What the policy would see of a call of ``tool`` with ``arguments`` and what it
    would decide (``plait policy explain``): nothing runs, nothing is stored."""
    call = ToolCall.create(id="explain", name=tool, arguments=arguments)
    facts = call_facts(
        policy,
        call,
        read_only=read_only,
        workspace=workspace,
        calls_so_far=calls_so_far,
        probe=probe,
    )
    return facts, policy.evaluate(facts)


def _placed_writes(
    command: ParsedCommand,
    base: str,
    workspace: str | None,
    probe: WorkspaceProbe | None,
    outside: list[str],
) -> ParsedCommand:
    moves = any(words and words[0] in _DIR_CHANGERS for words in command.commands)
    writes: list[str] = []
    unclear: list[str] = []
    for raw in command.writes:
        if raw in _HARMLESS:
            continue
        if moves or any(c in raw for c in "$`~*?[{"):
            unclear.append(raw)
            continue
        rel = relative_path(raw if raw.startswith("/") else posixpath.join(base, raw), workspace)
        if rel is not None and probe is not None and workspace is not None:
            rel = probe.resolve(workspace, rel)
        if rel is None:
            outside.append(raw)
        else:
            writes.append(rel)
    return ParsedCommand(
        ok=True, commands=command.commands, writes=tuple(writes), unclear=tuple(unclear)
    )
