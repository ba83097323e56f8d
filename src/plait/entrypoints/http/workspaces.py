"""Where a session created over HTTP works: each principal's workspace names resolve in a
directory of its own under the server's workspace root.

``{"workspace": "proj"}`` from principal ``ana`` binds ``<root>/@ana/proj`` (created on
demand); the same name from ``bo`` binds ``<root>/@bo/proj``. A name is one or more
segments joined by ``/``, each starting with a letter or digit (so never ``.``, ``..``,
empty or absolute). The directories are walked from an fd of the root one segment at a
time, each opened with ``O_NOFOLLOW`` relative to its parent's fd and created with
``mkdir`` relative to it: a symbolic link anywhere below the root (planted before or
swapped in during the walk) is refused, never followed, so no name reaches another
principal's directory or anything outside the root. An entry that exists but is not a
directory is refused too (``invalid_value``, 400).

An admin may instead bind an explicit existing directory by giving its absolute path, as
``plait sessions new --workspace DIR`` does.

A principal's directory name is ``@`` and its own name when that is a plain lowercase
name (``[a-z0-9][a-z0-9_-]*``, up to 63 characters), else ``@``, a readable prefix, ``~``
and a SHA-256 prefix of the name: distinct principals never share a directory (``Ana``
and ``ana`` included, on case-insensitive file systems too), a name such as ``../x`` or
``a/b`` is never a path, and no workspace of the earlier layout (``<root>/<name>``, whose
names never held ``@``) is ever taken for a principal's directory.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import re
import stat
from pathlib import Path

from plait.domain.errors import ConfigError, ValidationError
from plait.entrypoints.http._errors import ApiError

__all__ = ["bind_directory", "bind_workspace", "principal_directory"]

_SEGMENT = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")

_PLAIN_PRINCIPAL = re.compile(r"[a-z0-9][a-z0-9_-]{0,62}")
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def principal_directory(principal: str) -> str:
    """The one path segment that holds ``principal``'s workspaces under the root."""
    if _PLAIN_PRINCIPAL.fullmatch(principal):
        return f"@{principal}"
    prefix = re.sub(r"[^a-z0-9_-]+", "_", principal.lower()).strip("_-")[:40]
    digest = hashlib.sha256(principal.encode("utf-8", "surrogatepass")).hexdigest()[:32]
    return f"@{prefix}~{digest}"


def bind_workspace(root: Path, *, principal: str, name: str) -> str:
    """The directory, created on demand, that a session of ``principal`` naming the
    workspace ``name`` binds: ``<root>/<principal's directory>/<name>``."""
    segments = name.split("/")
    if len(name) > 200 or not all(_SEGMENT.fullmatch(s) for s in segments):
        raise ValidationError(
            f"workspace {name!r} is not a workspace name: up to 200 characters, segments of "
            "letters, digits, '.', '_' and '-' joined by '/', each starting with a letter or "
            "digit (an admin may give an existing directory's absolute path instead)",
            workspace=name,
        )
    mine = principal_directory(principal)
    base = root.resolve()
    _walk(base, [mine, *segments], name)
    return str(base.joinpath(mine, *segments))


def bind_directory(path: str, *, admin: bool) -> str:
    """An explicit existing directory, for an admin (anyone else: ``forbidden``)."""
    if not admin:
        raise ApiError(
            "only an admin may bind an explicit directory; name a workspace instead "
            '(e.g. {"workspace": "proj"}): it resolves in your own directory under the '
            "server's workspace root",
            status=403,
            code="forbidden",
            workspace=path,
        )
    if "\x00" in path or not path.startswith("/"):
        raise ValidationError(f"workspace {path!r} is not an absolute path", workspace=path)
    real = os.path.realpath(path)
    if not os.path.isdir(real):
        raise ValidationError(f"workspace {path!r} is not an existing directory", workspace=path)
    return real


def _walk(root: Path, segments: list[str], name: str) -> None:
    """Open (creating as needed) each segment below ``root`` without following links."""
    try:
        os.makedirs(root, exist_ok=True)
        fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as error:
        raise ConfigError(
            "the server's workspace root (PLAIT_WORKSPACE_ROOT) is not a directory it can "
            f"open: {error.strerror}",
            workspace=name,
        ) from None
    try:
        for segment in segments:
            with contextlib.suppress(FileExistsError):
                os.mkdir(segment, 0o777, dir_fd=fd)
            try:
                child = os.open(segment, _DIR_FLAGS, dir_fd=fd)
            except OSError as error:
                raise _refusal(error, fd, segment, name) from None
            os.close(fd)
            fd = child
    finally:
        os.close(fd)


def _refusal(error: OSError, parent: int, segment: str, name: str) -> ValidationError:
    if error.errno not in (errno.ELOOP, errno.ENOTDIR):
        return ValidationError(
            f"workspace {name!r} cannot be opened: {error.strerror}", workspace=name
        )
    try:
        kind = stat.S_IFMT(os.stat(segment, dir_fd=parent, follow_symlinks=False).st_mode)
    except OSError:
        kind = 0
    what = "a symbolic link" if kind == stat.S_IFLNK else "not a directory"
    return ValidationError(
        f"workspace {name!r} cannot be bound: {segment!r} on its way is {what}",
        workspace=name,
    )
