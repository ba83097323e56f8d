"""Tool adapters: executors for the tools a session can call."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from plait.adapters.tools._config_files import config_absent, remove_new_config, unmade_text
from plait.adapters.tools._limits import WorkspaceLimits
from plait.adapters.tools.sandbox import Limits, SandboxSettings, SandboxUnavailableError
from plait.application.ports import Tool
from plait.domain.policy import Policy

if TYPE_CHECKING:
    from plait.adapters.tools._git import GitScan, scan_git, undo_new_git
    from plait.adapters.tools.command import command_tools
    from plait.adapters.tools.file_tools import workspace_tools

__all__ = [
    "GitScan",
    "Limits",
    "SandboxSettings",
    "SandboxUnavailableError",
    "WorkspaceLimits",
    "command_tools",
    "config_absent",
    "remove_new_config",
    "scan_git",
    "session_tools",
    "undo_new_git",
    "unmade_text",
    "workspace_tools",
]


def session_tools(
    *,
    sandbox: SandboxSettings | None = None,
    limits: WorkspaceLimits | None = None,
    protected: Sequence[str | os.PathLike[str]] = (),
    policy: Policy | None = None,
) -> list[Tool]:
    """The tools a session gets by default: the five file tools and ``run_command`` (plus
    ``run_tests`` when ``sandbox.test_command`` is set). ``protected`` (plait's store and
    artifacts, :func:`plait.adapters.stores.protected_paths`) is denied to the file tools
    and invisible to commands; ``policy``'s write-denied paths are read-only to commands
    (its file rules bind the file tools through the governance checks, and again on the
    real path when a write is made), and its ``protect_git`` keeps every tool out of git
    repositories' config and hooks."""
    # lazy: the tools' typed arguments import pydantic (start-up time, see __getattr__)
    from plait.adapters.tools.command import command_tools
    from plait.adapters.tools.file_tools import workspace_tools

    return [
        *workspace_tools(limits=limits, protected=protected, policy=policy),
        *command_tools(sandbox, protected=protected, policy=policy),
    ]


def __getattr__(name: str) -> Any:
    # lazy: the tools' typed arguments import pydantic: only when tools are built
    if name in ("GitScan", "scan_git", "undo_new_git"):  # shutil, bz2, lzma: ~3 ms
        from plait.adapters.tools import _git

        return getattr(_git, name)
    if name == "command_tools":
        from plait.adapters.tools.command import command_tools

        return command_tools
    if name == "workspace_tools":
        from plait.adapters.tools.file_tools import workspace_tools

        return workspace_tools
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
