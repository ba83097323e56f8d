"""Sweeps the temporary files of interrupted atomic writes out of a workspace.

File tools write ``.plait-<random>.tmp`` beside the target, fsync it and rename it into
place; a process killed in between leaves the temporary file. Recovery
(``AgentService.recover``) calls :meth:`WorkspaceLeftovers.sweep` on the workspace of each
run it takes over.
"""

from __future__ import annotations

import os
import re

__all__ = ["WorkspaceLeftovers"]

_TMP = re.compile(r"^\.plait-[0-9a-f]{16}\.tmp$")
_SKIP_DIRS = frozenset({".git", ".hg", ".svn", "node_modules", ".venv", "__pycache__"})


class WorkspaceLeftovers:
    """:class:`~plait.application.ports.LeftoverSweeper` over the local file system."""

    def sweep(self, workspace: str, *, older_than: float) -> list[str]:
        removed: list[str] = []
        for root, dirs, files in os.walk(workspace, followlinks=False):
            dirs[:] = [d for d in dirs if d not in _SKIP_DIRS]
            for name in files:
                if not _TMP.match(name):
                    continue
                path = os.path.join(root, name)
                try:
                    st = os.lstat(path)
                    if st.st_mtime < older_than:
                        os.unlink(path)
                        removed.append(path)
                except FileNotFoundError:
                    continue
        return removed
