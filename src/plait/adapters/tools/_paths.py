"""Workspace-confined file access through directory file descriptors.

A path the model gives is walked one component at a time from an fd of the workspace root,
every component opened with ``O_NOFOLLOW`` relative to its parent's fd. A symbolic link is
read with ``readlink`` and its target walked by hand (relative targets from the link's
directory, absolute ones from the root when they name a place inside the workspace);
``..`` pops back to the directory fd we came from and may never pop past the root. The
final open, read, write and rename all go through those fds, so there is no path string
the kernel re-resolves later: swapping a directory for a link to the outside, before or
during an operation, cannot redirect it (the swapped-in link is either seen and checked,
or never looked at because we already hold the real directory's fd).

Errors name the path as the model gave it, never the host path of the workspace.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import posixpath
import secrets
import stat
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType
from typing import Literal

from plait.adapters.tools._git import denied as git_denied
from plait.adapters.tools._git import git_write
from plait.adapters.tools._guard import Guard
from plait.domain.errors import PolicyError, ToolError

__all__ = [
    "MAX_SYMLINK_HOPS",
    "SNIFF_BYTES",
    "Entry",
    "FileState",
    "MissingParentError",
    "Workspace",
    "file_state",
    "hash_fd",
    "is_binary",
    "open_child_file",
    "os_error",
    "replace_file",
]

SNIFF_BYTES = 8192
MAX_SYMLINK_HOPS = 40
"""Symbolic links followed (and directories created) per path, like the kernel's limit."""

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# O_NONBLOCK: opening a FIFO for reading must not wait for a writer.
_OPEN_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_TMP_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC

FileState = tuple[int, int, int, int] | None
"""Identity of a file version (device, inode, size, mtime in ns); None when absent."""


def file_state(st: os.stat_result | None) -> FileState:
    if st is None:
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def os_error(exc: OSError, display: str) -> ToolError:
    """A ToolError naming the model's path. ``str(e)`` is never used: it can hold host paths."""
    reason = exc.strerror or type(exc).__name__
    return ToolError(f"cannot access {display!r}: {reason}", path=display)


def _kind_name(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "a special file"


def _check_kind(mode: int, display: str) -> None:
    if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
        raise ToolError(
            f"{display!r} is {_kind_name(mode)}, not a regular file or directory", path=display
        )


def _readlink(name: str, dir_fd: int) -> str | None:
    """The target of ``name`` if it is a symbolic link, else None."""
    try:
        return os.readlink(name, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno in (errno.EINVAL, errno.ENOENT):
            return None
        raise


def _parts(path: str) -> list[str]:
    return [p for p in path.split("/") if p not in ("", ".")]


class MissingParentError(ToolError):
    """A directory on the way to the final component does not exist."""


@dataclass(slots=True)
class Entry:
    """A resolved path. ``fd`` is the object itself, opened read-only (None when it does
    not exist yet); ``parent_fd``/``name`` the directory entry that holds it (both None
    when the path names a directory reached by ``.``/``..`` or the root itself).
    ``st`` is the ``fstat`` of ``fd``. Close it (or use it as a context manager)."""

    display: str
    parent_fd: int | None
    name: str | None
    fd: int | None
    st: os.stat_result | None

    @property
    def is_dir(self) -> bool:
        return self.st is not None and stat.S_ISDIR(self.st.st_mode)

    def close(self) -> None:
        for fd in (self.fd, self.parent_fd):
            if fd is not None:
                os.close(fd)
        self.fd = self.parent_fd = None

    def __enter__(self) -> Entry:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class Workspace:
    """An open workspace root. Every access goes through :meth:`open` or the fds it returns."""

    def __init__(
        self,
        root: str,
        *,
        guard: Guard | None = None,
        protect_git: bool = False,
        write_denied: Callable[[str], str | None] | None = None,
    ) -> None:
        self.guard = guard or Guard()
        self.protect_git = protect_git
        self.write_denied = write_denied
        """For writes: the reason a policy denies writing the real workspace-relative
        path a walk arrived at (None: not denied), checked when the path is used."""
        try:
            self._fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError as exc:
            raise ToolError("the session's workspace is not available") from exc
        absolute = os.path.abspath(root)
        # Absolute paths (from the model or in link targets) are accepted under either
        # spelling of the root; they are only translated to components walked from _fd.
        self._aliases = [_parts(a) for a in dict.fromkeys([absolute, os.path.realpath(root)])]

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> Workspace:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _inside(self, absolute: str) -> list[str] | None:
        """The components of an absolute path relative to the root, if it is under it."""
        parts = _parts(absolute)
        for alias in self._aliases:
            if parts[: len(alias)] == alias:
                return parts[len(alias) :]
        return None

    def _components(self, path: str) -> list[str]:
        if not isinstance(path, str) or not path:
            raise ToolError("path must be a non-empty string", path=str(path))
        if "\0" in path:
            raise ToolError("path contains a NUL character", path=path)
        if path.startswith("/"):
            inside = self._inside(path)
            if inside is None:
                raise ToolError(f"path {path!r} is outside the workspace", path=path)
            return inside
        return path.split("/")  # "~" is an ordinary name here: nothing is expanded

    def relative(self, path: str) -> str:
        """The path relative to the root, lexically normalized, for display ("" for the root)."""
        joined = posixpath.normpath("/".join(self._components(path)) or ".")
        return "" if joined == "." else joined

    def open(self, path: str, *, create_parents: bool = False, write: bool = False) -> Entry:
        """Resolve ``path`` inside the workspace and open what it names.

        Raises ToolError if the path leads outside (through ``..``, an absolute path or a
        symbolic link), passes through a non-directory, loops, or names a special file.
        A missing final component gives an Entry with ``fd=None``; missing directories
        before it raise MissingParentError, or are created when ``create_parents``. With
        ``write`` and :attr:`protect_git`, a path through or into a git place (see
        :mod:`plait.adapters.tools._git`) raises PolicyError, before anything is created;
        with ``write``, so does a real path (links resolved, as it is now) that
        :attr:`write_denied` denies.
        """
        return _Resolution(self, path, create_parents, write).run()

    @staticmethod
    def _escape(display: str, *, via_link: bool) -> ToolError:
        how = " through a symbolic link" if via_link else ""
        return ToolError(f"path {display!r} leads outside the workspace{how}", path=display)


class _Resolution:
    """One walk of a path by :meth:`Workspace.open`: the components still to walk, the fds
    of the directories walked below the root, and the links followed so far."""

    def __init__(self, ws: Workspace, path: str, create_parents: bool, write: bool) -> None:
        self.ws = ws
        self.display = path
        self.create_parents = create_parents
        self.git = write and ws.protect_git
        self.write_denied = ws.write_denied if write else None
        self.pending = deque(ws._components(path))
        self.stack: list[int] = []  # fds of the directories walked below the root
        self.names: list[str] = []  # their names: the real path walked so far
        self.hops = 0
        self.via_link = False

    def run(self) -> Entry:
        pending, stack = self.pending, self.stack
        try:
            while pending:
                name = pending.popleft()
                if name in ("", "."):
                    continue
                if name == "..":
                    if not stack:
                        raise self.ws._escape(self.display, via_link=self.via_link)
                    os.close(stack.pop())
                    self.names.pop()
                    continue
                parent = stack[-1] if stack else self.ws._fd
                if pending:  # a directory on the way
                    self._enter(name, parent)
                    continue
                entry = self._final(name, parent)
                if entry is not None:
                    return entry
            return self._ended_on_dir()
        except OSError as exc:
            raise os_error(exc, self.display) from exc
        finally:
            for fd in stack:
                os.close(fd)

    def _spend(self) -> None:
        self.hops += 1
        if self.hops > MAX_SYMLINK_HOPS:
            raise ToolError(
                f"too many levels of symbolic links in {self.display!r}", path=self.display
            )

    def _follow(self, target: str) -> None:
        self._spend()
        self.via_link = True
        if target.startswith("/"):
            inside = self.ws._inside(target)
            if inside is None:
                raise self.ws._escape(self.display, via_link=True)
            while self.stack:
                os.close(self.stack.pop())
            self.names.clear()
            self.pending.extendleft(reversed(inside))
        else:
            self.pending.extendleft(reversed(target.split("/")))

    def _take(self, fd: int | None, st: os.stat_result | None, name: str | None) -> Entry:
        if self.write_denied is not None and name is not None:
            reason = self.write_denied("/".join([*self.names, name]))
            if reason is not None:
                if fd is not None:
                    os.close(fd)
                raise PolicyError(
                    f"writing {self.display!r} is denied: {reason}", path=self.display
                )
        parent = self.stack.pop() if self.stack else os.dup(self.ws._fd)
        entry = Entry(display=self.display, parent_fd=parent, name=name, fd=fd, st=st)
        if self.ws.guard.blocks(parent, name, st):
            entry.close()
            raise self.ws.guard.denied(self.display)
        return entry

    def _check_git(self, name: str, parent: int) -> None:
        if self.git and git_write(parent, name):
            raise git_denied(self.display)

    def _enter(self, name: str, parent: int) -> None:
        """Step into the directory ``name`` on the way (creating or following it)."""
        display, guard = self.display, self.ws.guard
        self._check_git(name, parent)
        try:
            self.stack.append(os.open(name, _DIR_FLAGS, dir_fd=parent))
            self.names.append(name)
            if guard.blocks(parent, name, os.fstat(self.stack[-1])):
                raise guard.denied(display)
        except FileNotFoundError:
            if not self.create_parents:
                raise MissingParentError(
                    f"{display!r} does not exist: no directory {name!r}", path=display
                ) from None
            self._spend()
            # If it was created meanwhile, open that (again with O_NOFOLLOW).
            with contextlib.suppress(FileExistsError):
                os.mkdir(name, 0o777, dir_fd=parent)
            self.pending.appendleft(name)
        except OSError as exc:
            if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
                raise os_error(exc, display) from exc
            target = _readlink(name, parent)
            if target is None:
                raise ToolError(f"{display!r}: {name!r} is not a directory", path=display) from None
            self._follow(target)

    def _final(self, name: str, parent: int) -> Entry | None:
        """Open the final component; None when it is to be looked at again (a link was
        followed, or the entry was swapped meanwhile)."""
        display = self.display
        self._check_git(name, parent)
        try:
            lst = os.stat(name, dir_fd=parent, follow_symlinks=False)
        except FileNotFoundError:
            return self._take(None, None, name)
        if stat.S_ISLNK(lst.st_mode):
            target = _readlink(name, parent)
            if target is None:  # replaced meanwhile: look again
                self._spend()
                self.pending.appendleft(name)
            else:
                self._follow(target)
            return None
        # Checked before opening so a device is never opened at all; the fstat
        # below is the check that counts.
        _check_kind(lst.st_mode, display)
        try:
            fd = os.open(name, _OPEN_FLAGS, dir_fd=parent)
        except FileNotFoundError:
            return self._take(None, None, name)
        except OSError as exc:
            if exc.errno != errno.ELOOP:
                raise os_error(exc, display) from exc
            self._spend()  # swapped for a link after the stat: look again
            self.pending.appendleft(name)
            return None
        try:
            st = os.fstat(fd)
            _check_kind(st.st_mode, display)
        except BaseException:
            os.close(fd)
            raise
        return self._take(fd, st, name)

    def _ended_on_dir(self) -> Entry:
        """The path ended on a directory reached by the walk (or the root itself)."""
        fd = os.dup(self.stack[-1] if self.stack else self.ws._fd)
        entry = Entry(display=self.display, parent_fd=None, name=None, fd=fd, st=os.fstat(fd))
        if self.ws.guard.blocks(None, None, entry.st):
            entry.close()
            raise self.ws.guard.denied(self.display)
        return entry


# --- writing --------------------------------------------------------------------------------


def replace_file(
    parent_fd: int,
    name: str,
    data: bytes,
    *,
    display: str,
    mode: int | None = None,
    expect: FileState | Literal["any"] = "any",
) -> None:
    """Atomically make ``name`` in ``parent_fd`` hold ``data``: write a temporary file in
    the same directory, fsync it, rename it over ``name``, fsync the directory.

    ``expect`` is the state the caller saw; if ``name`` no longer matches it, nothing is
    replaced and a ToolError says the file changed. For ``expect=None`` (must not exist)
    the temporary file is hard-linked to ``name``, which fails atomically if it exists;
    otherwise the state is compared just before the rename (a small window remains). The
    rename replaces the directory entry itself, so even a link swapped in at ``name`` is
    replaced, never followed.
    """
    changed = ToolError(
        f"{display!r} changed while it was being written; read it again and retry",
        path=display,
    )
    tmp = f".plait-{secrets.token_hex(8)}.tmp"
    fd = os.open(tmp, _TMP_FLAGS, 0o666, dir_fd=parent_fd)
    try:
        try:
            if mode is not None:
                os.fchmod(fd, mode)
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        if expect is None and _link_new(tmp, name, parent_fd, changed):
            os.unlink(tmp, dir_fd=parent_fd)
        else:
            if expect != "any":
                try:
                    now = file_state(os.stat(name, dir_fd=parent_fd, follow_symlinks=False))
                except FileNotFoundError:
                    now = None
                if now != expect:
                    raise changed
            os.rename(tmp, name, src_dir_fd=parent_fd, dst_dir_fd=parent_fd)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp, dir_fd=parent_fd)
        raise
    os.fsync(parent_fd)  # make the rename itself durable


def _link_new(tmp: str, name: str, parent_fd: int, changed: ToolError) -> bool:
    """Create ``name`` as a hard link to ``tmp`` unless it exists; False if the file
    system cannot hard-link (the caller falls back to check-and-rename)."""
    try:
        os.link(tmp, name, src_dir_fd=parent_fd, dst_dir_fd=parent_fd, follow_symlinks=False)
    except FileExistsError:
        raise changed from None
    except OSError as exc:
        if exc.errno in (errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EMLINK, errno.EXDEV):
            return False
        raise
    return True


# --- reading -------------------------------------------------------------------------------


def is_binary(fd: int) -> bool:
    """A NUL byte among the first :data:`SNIFF_BYTES` marks a file as binary."""
    return b"\0" in os.pread(fd, SNIFF_BYTES, 0)


def hash_fd(fd: int, limit: int, display: str) -> str:
    """sha256 (hex) of the whole file, read with pread; refuses files over ``limit``."""
    digest = hashlib.sha256()
    offset = 0
    while chunk := os.pread(fd, 1 << 20, offset):
        offset += len(chunk)
        if offset > limit:
            raise ToolError(f"{display!r} is too large to hash ({limit} bytes max)", path=display)
        digest.update(chunk)
    return digest.hexdigest()


def open_child_file(dir_fd: int, name: str) -> tuple[int, os.stat_result] | None:
    """Open a regular file in ``dir_fd`` without following links; None if it is not one
    (any more)."""
    try:
        fd = os.open(name, _OPEN_FLAGS, dir_fd=dir_fd)
    except OSError:
        return None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        return None
    return fd, st
