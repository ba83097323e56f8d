"""Artifacts of the JSONL store: ``artifacts/<artifact_id>``, a JSON header line and then
the bytes, written under a temporary name, fsynced and renamed into place."""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

from plait.adapters.stores.jsonl.files import SAFE_NAME, fsync_dir
from plait.adapters.stores.shared import codec
from plait.adapters.stores.shared.state import artifact_not_found
from plait.domain.errors import CorruptStoreError
from plait.domain.messages import ArtifactRef

__all__ = ["ArtifactFiles", "decode_artifact"]


class ArtifactFiles:
    def __init__(self, directory: Path) -> None:
        self._dir = directory

    def put(self, ref: ArtifactRef, write: Callable[[BinaryIO], object]) -> ArtifactRef:
        """Store ``ref``'s bytes, produced by ``write`` into the open file, unless stored."""
        path = self._dir / ref.id
        if path.exists():
            return ref
        header = {"schema_version": codec.SCHEMA_VERSION, "id": ref.id}
        header.update(sha256=ref.sha256, size=ref.size, media_type=ref.media_type)
        tmp = self._dir / f".{ref.id}.{os.getpid()}.{threading.get_ident()}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
        try:
            with os.fdopen(fd, "wb", closefd=True) as file:
                file.write((codec.dumps(header) + "\n").encode())
                write(file)
                file.flush()
                os.fsync(file.fileno())
            os.replace(tmp, path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        fsync_dir(self._dir)
        return ref

    def read(self, artifact_id: str) -> tuple[Path, bytes]:
        """The file and its whole content (header line included)."""
        if not isinstance(artifact_id, str) or not SAFE_NAME.match(artifact_id):
            raise artifact_not_found(str(artifact_id))
        path = self._dir / artifact_id
        try:
            return path, path.read_bytes()
        except FileNotFoundError:
            raise artifact_not_found(artifact_id) from None


def decode_artifact(path: Path, artifact_id: str, blob: bytes) -> tuple[ArtifactRef, bytes]:
    """Check a stored artifact's header against its bytes (outside the store's lock)."""
    head, sep, data = blob.partition(b"\n")
    try:
        if not sep:
            raise ValueError("no header line")
        header = codec.check_schema(codec.loads(head.decode()), "artifact header")
        ref = codec.artifact_from_dict(header)
    except (ValueError, KeyError, TypeError) as error:
        raise CorruptStoreError(f"{path}: bad artifact header: {error}", path=str(path)) from error
    if ref.id != artifact_id or len(data) != ref.size:
        raise CorruptStoreError(f"{path}: artifact size or id mismatch", path=str(path))
    if hashlib.sha256(data).hexdigest() != ref.sha256:
        raise CorruptStoreError(f"{path}: artifact content does not match its sha256")
    return ref, data
