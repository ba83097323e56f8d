"""The gate's view of the workspace: symlink-resolved paths for the policy, and a digest
of the files a call touches, to which an approval is bound."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

__all__ = ["FileProbe"]


class FileProbe:
    """:class:`~plait.application.governance.facts.WorkspaceProbe` on the local disk."""

    def resolve(self, workspace: str, path: str) -> str | None:
        root = os.path.realpath(workspace)
        real = os.path.realpath(os.path.join(root, path))
        if real == root:
            return "."
        if not real.startswith(root.rstrip(os.sep) + os.sep):
            return None
        return Path(os.path.relpath(real, root)).as_posix()

    def state(self, workspace: str, paths: tuple[str, ...]) -> str | None:
        h = hashlib.sha256()
        root = Path(workspace)
        for rel in sorted(paths):
            h.update(rel.encode() + b"\0")
            target = root / rel
            try:
                if target.is_dir():
                    h.update(b"dir\0")
                    continue
                with target.open("rb") as f:
                    for chunk in iter(lambda: f.read(1 << 16), b""):
                        h.update(chunk)
                h.update(b"\0file\0")
            except FileNotFoundError:
                h.update(b"absent\0")
            except OSError as e:
                h.update(f"unreadable:{e.errno}\0".encode())
        return "sha256:" + h.hexdigest()
