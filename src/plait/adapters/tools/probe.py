"""The gate's view of the workspace: symlink-resolved paths for the policy, and a digest
of the files a call touches, to which an approval is bound.

The digest is taken before the call runs, so it must return promptly whatever the
workspace holds: a FIFO is opened without waiting for a writer and, like other special
files, digested by its type only; a regular file is hashed up to :data:`MAX_HASHED_BYTES`,
beyond which its size and modification time stand for the rest.
"""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path
from typing import Any

__all__ = ["MAX_HASHED_BYTES", "FileProbe"]

MAX_HASHED_BYTES = 64 * 1024 * 1024
_OPEN = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC


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
        hasher = hashlib.sha256()
        root = Path(workspace)
        for rel in sorted(paths):
            hasher.update(rel.encode() + b"\0")
            target = root / rel
            try:
                if target.is_dir():
                    hasher.update(b"dir\0")
                    continue
                _digest_file(hasher, target)
            except FileNotFoundError:
                hasher.update(b"absent\0")
            except OSError as exc:
                hasher.update(f"unreadable:{exc.errno}\0".encode())
        return "sha256:" + hasher.hexdigest()


def _digest_file(hasher: Any, target: Path) -> None:
    fd = os.open(target, _OPEN)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            hasher.update(f"special:{stat.S_IFMT(st.st_mode):o}\0".encode())
            return
        left = MAX_HASHED_BYTES
        while left > 0 and (chunk := os.read(fd, min(1 << 16, left))):
            hasher.update(chunk)
            left -= len(chunk)
        if st.st_size > MAX_HASHED_BYTES:
            hasher.update(f"\0size:{st.st_size}:mtime:{st.st_mtime_ns}".encode())
        hasher.update(b"\0file\0")
    finally:
        os.close(fd)
