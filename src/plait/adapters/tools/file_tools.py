"""The file tools as a session is given them: read, list, search, write, edit, each with
its spec, what it is kept out of (:class:`_Shield`) and an executor. What they do is in
:mod:`.workspace`, loaded at the first call of one of them, so that building the tools
when a runtime opens does not load the path walking, the tree walk and git's checks
(issue 27 item 4)."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from plait.adapters.tools._catalog import SPECS, parse
from plait.adapters.tools._deadline import Deadline
from plait.adapters.tools._guard import Guard
from plait.adapters.tools._limits import WorkspaceLimits
from plait.application.ports import Tool
from plait.domain.errors import ToolError
from plait.domain.policy import Action, CallFacts, Policy
from plait.domain.record import record
from plait.domain.tools import EffectClass, ToolSpec

if TYPE_CHECKING:
    from plait.application.ports import ToolInvocation, ToolOutput

__all__ = ["workspace_tools"]


@record
class _Shield:
    """What every file tool call keeps out of: the protected paths (their identities now
    and when the tools were made) and, for writes, with ``policy``, the paths it denies
    and git repositories (unless it says ``protect_git = false``)."""

    paths: tuple[str, ...]
    known: Guard
    policy: Policy | None

    def write_denied(self, tool: str) -> Callable[[str], str | None] | None:
        """The policy's ``deny`` for ``tool`` writing a real workspace path, applied when
        the path is used: the gate saw the path as it was then, and a link or a renamed
        directory could lead elsewhere by now."""
        policy = self.policy
        if policy is None:  # the default's protect_config, as commands get it
            return _config_denied

        def denied(path: str) -> str | None:
            verdict = policy.evaluate(CallFacts(tool=tool, read_only=False, paths=(path,)))
            return verdict.reason if verdict.action is Action.DENY else None

        return denied


_CONFIG_ONLY = Policy(protected=())
"""The defaults' ``protect_config`` alone, for tools made without a policy."""


def _config_denied(path: str) -> str | None:
    verdict = _CONFIG_ONLY.evaluate(CallFacts(tool="", read_only=False, paths=(path,)))
    return verdict.reason if verdict.rule == "protect_config" else None


def _tool(spec: ToolSpec, limits: WorkspaceLimits, shield: _Shield) -> Tool:
    git = shield.policy.protect_git if shield.policy is not None else True
    write_denied = shield.write_denied(spec.name)

    def blocking(root: str, args: Any, deadline: Deadline) -> str:
        # lazy: the file operations, path and tree walks, git's checks (~4 ms of start-up),
        # at the first call of a file tool, not when the tools are built
        from plait.adapters.tools.workspace import perform

        guard = Guard(shield.paths, known=shield.known)
        return perform(
            spec.name,
            root,
            guard,
            protect_git=git,
            write_denied=write_denied,
            args=args,
            limits=limits,
            deadline=deadline,
        )

    async def execute(invocation: ToolInvocation) -> ToolOutput:
        if invocation.workspace is None:
            raise ToolError("this session has no workspace")
        args = parse(spec.name, invocation.call.arguments())
        # The thread cannot be killed: it checks this deadline between lines, files and
        # entries, and stops there once the runner's time limit passed or we stop waiting.
        deadline = Deadline(invocation.time_limit_seconds, cap=limits.max_call_seconds)
        try:
            content = await asyncio.to_thread(blocking, invocation.workspace, args, deadline)
        except asyncio.CancelledError:  # a timeout or a cancellation of the run
            deadline.stop()
            raise
        # lazy: a call's output type (~0.7 ms of start-up), at the first call
        from plait.application.ports import ToolOutput

        return ToolOutput(content=content)

    # Reading tools stop at their next check when cancelled. A write is short and bounded
    # by its size; a cancelled run waits for it and records what really happened.
    read_only = spec.effect is EffectClass.READ_ONLY
    effect_of = _write_effect if spec.name == "write_file" else None
    return Tool(spec=spec, execute=execute, stoppable=read_only, effect_of=effect_of)


def _write_effect(args: dict[str, Any]) -> EffectClass:
    """A compare-and-write is idempotent: repeating it after it took effect finds the file
    already holding exactly ``content`` and writes nothing ("already written"); if someone
    changed the file meanwhile, the repeat is refused. Either way no second effect."""
    return EffectClass.IDEMPOTENT if args.get("expected_sha256") else EffectClass.SIDE_EFFECT


def workspace_tools(
    *,
    limits: WorkspaceLimits | None = None,
    protected: Sequence[str | os.PathLike[str]] = (),
    policy: Policy | None = None,
) -> list[Tool]:
    """The five file tools (read_file, list_dir, search_text, write_file, edit_file),
    each confined to the invocation's workspace. ``protected`` names paths they must never
    read, list, search or write (plait's own store, see
    :func:`plait.adapters.stores.protected_paths`); an attempt is ``denied``. Writing
    into a git repository's directory (``.git``, nested and bare ones included) or making
    one is ``denied`` too unless ``policy`` says ``protect_git = false``; so is a write
    whose real path (links resolved when it is made) ``policy`` denies."""
    limits = limits or WorkspaceLimits()
    paths = tuple(os.fspath(p) for p in protected)
    shielded = _Shield(paths, Guard(paths), policy)
    return [_tool(spec, limits, shielded) for spec in SPECS]
