"""plait's own configuration in a workspace (:data:`plait.domain.policy.PLAIT_CONFIG_FILES`),
kept from the agent (the policy's ``protect_config``): where one exists, commands and
sandboxed MCP servers find it bound read-only (the policy's paths); where one does not,
what a command or an MCP tool call made in its place is removed when the call ends. Like
the undoing of new git repositories, this leaves a window while the call runs, in which a
``plait`` run started on the host could read it."""

from __future__ import annotations

import contextlib
import os
import stat

__all__ = ["config_absent", "remove_new_config", "unmade_text"]


def config_absent(root: str, names: tuple[str, ...]) -> tuple[str, ...]:
    """Which of plait's configuration files ``names`` the workspace root lacks now."""
    return tuple(name for name in names if not os.path.lexists(os.path.join(root, name)))


def remove_new_config(root: str, absent: tuple[str, ...]) -> list[str]:
    """Remove each of ``absent`` a command made at the workspace root (a file or a link;
    a directory of that name is no configuration and stays); the names removed."""
    if not absent:
        return []
    made: list[str] = []
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        for name in absent:
            try:
                st = os.stat(name, dir_fd=fd, follow_symlinks=False)
            except FileNotFoundError:
                continue
            if not stat.S_ISDIR(st.st_mode):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(name, dir_fd=fd)
                made.append(name)
    finally:
        os.close(fd)
    return made


def unmade_text(names: list[str]) -> str:
    """The end of the note a result gets for ``names`` removed."""
    return (
        f"{', '.join(repr(n) for n in names)}, plait's own configuration, which the next run "
        "on the host would read (MCP server commands, the sandbox's settings, the tool "
        "policy); plait removed it (the policy's protect_config)"
    )
