"""The bubblewrap sandbox commands run in (docs/design.md#governance: what a tool can touch is
decided by its environment, not by filtering command strings).

Inside: the system directories read-only (``/etc`` without the files only root may read),
the workspace read-write at its own path, a private ``/tmp``, a fresh ``/dev`` and
``/proc``, no network unless allowed, new user/PID/IPC/UTS/cgroup namespaces, no
capabilities, no further user namespaces, a new session, and only the environment plait
passes. Policy paths are bound read-only or hidden on top; plait's own store and artifact
paths are always hidden. Nothing else of the host file system exists in there.

Binds are made by path when the sandbox starts, so every writable directory that leads to
one is bound onto itself too: a mount point cannot be renamed, removed or replaced, and
no command can move a protected path away and make a new one in its place. bwrap reads
its options from a file descriptor, so the paths they name are not on its command line.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import functools
import os
import stat
import subprocess
from collections.abc import Iterable, Sequence

from plait.adapters.tools._settings import Limits, SandboxSettings
from plait.domain.errors import ToolError
from plait.domain.policy import PLAIT_CONFIG_FILES, Action, Policy, glob_match
from plait.domain.record import record

__all__ = [
    "Limits",
    "Mounts",
    "SandboxSettings",
    "SandboxUnavailableError",
    "args_data",
    "bwrap_argv",
    "bwrap_options",
    "expand_glob",
    "plan_mounts",
    "policy_paths",
    "sandbox_env",
    "sandbox_problem",
    "with_policy",
]

_SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc")
_MAX_MATCHES = 512
_MAX_WALK = 100_000
_NAMESPACES = [
    "--unshare-user",
    "--unshare-ipc",
    "--unshare-pid",
    "--unshare-uts",
    "--unshare-cgroup-try",
    "--disable-userns",
    "--cap-drop",
    "ALL",
    "--die-with-parent",
    "--new-session",
]
_INSTALL = (
    "install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap; Fedora: dnf install bubblewrap)"
)
_USERNS = (
    "enable unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1 and "
    "user.max_user_namespaces > 0; on Ubuntu 23.10+ also "
    "kernel.apparmor_restrict_unprivileged_userns=0, or run plait in a container that "
    "allows them)"
)


class SandboxUnavailableError(ToolError):
    """Commands cannot run sandboxed here and the settings do not allow running them
    unsandboxed. The message names the fix."""

    code = "sandbox_unavailable"


@functools.lru_cache(maxsize=8)
def sandbox_problem(bwrap: str = "bwrap") -> str | None:
    """None when bubblewrap can make the sandbox here, else what is wrong and the fix.
    Checked once per process (the answer does not change while plait runs)."""
    import shutil  # lazy: shutil, bz2, lzma (~3 ms), at the first command's check

    path = shutil.which(bwrap)
    if path is None:
        return f"bubblewrap ({bwrap!r}) is not installed: {_INSTALL}"
    argv = [path, "--ro-bind", "/", "/", "--unshare-net", *_NAMESPACES, "true"]
    try:
        done = subprocess.run(argv, capture_output=True, timeout=30, env={}, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"bubblewrap ({path}) could not be started ({type(exc).__name__}): {_INSTALL}"
    if done.returncode != 0:
        said = done.stderr.decode("utf-8", "replace").strip().splitlines()
        why = said[-1] if said else f"exit code {done.returncode}"
        return f"bubblewrap cannot create its namespaces here ({why}): {_USERNS}"
    return None


def sandbox_env(settings: SandboxSettings, environ: dict[str, str]) -> dict[str, str]:
    """The whole environment of a sandboxed command: an allow-list, never the rest."""
    env = {k: environ[k] for k in settings.env_allow if k in environ}
    env.update(PATH=settings.path, HOME="/tmp", TMPDIR="/tmp")
    env.update(settings.env_set)
    return env


# --- policy ---------------------------------------------------------------------------------

_WRITING_TOOLS = ("write_file", "edit_file", "run_command", "run_tests")
_READING_TOOLS = ("read_file", "list_dir", "search_text")


def _covers(tools: Iterable[str], names: Iterable[str]) -> bool:
    return any(fnmatch.fnmatchcase(n, t) for t in tools for n in names)


def policy_paths(policy: Policy) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The workspace globs a policy denies for writing and for reading, as the sandbox
    enforces them: the protected paths (when writes to them are denied) and the paths of
    ``deny`` rules that cover a writing tool are bound read-only; those of ``deny`` rules
    that cover a reading tool are hidden. Rules that ask for review or approval leave the
    path writable: the command as a whole is what gets reviewed or approved. With
    ``protect_config``, plait's own configuration files are read-only too."""
    read_only: list[str] = list(PLAIT_CONFIG_FILES) if policy.protect_config else []
    hidden: list[str] = []
    if policy.protected_action is Action.DENY:
        read_only += policy.protected
    for rule in policy.rules:
        if rule.action is not Action.DENY or not rule.paths or rule.commands:
            continue
        if _covers(rule.tools, _WRITING_TOOLS):
            read_only += rule.paths
        if _covers(rule.tools, _READING_TOOLS):
            hidden += rule.paths
    return tuple(dict.fromkeys(read_only)), tuple(dict.fromkeys(hidden))


def with_policy(settings: SandboxSettings, policy: Policy | None) -> SandboxSettings:
    """``settings`` with the policy's write- and read-denied paths added."""
    if policy is None:
        return settings
    read_only, hidden = policy_paths(policy)
    return dataclasses.replace(
        settings,
        read_only_paths=tuple(dict.fromkeys((*settings.read_only_paths, *read_only))),
        hidden_paths=tuple(dict.fromkeys((*settings.hidden_paths, *hidden))),
    )


# --- paths ----------------------------------------------------------------------------------


def _has_magic(part: str) -> bool:
    return any(c in part for c in "*?[")


def expand_glob(root: str, pattern: str) -> list[str]:
    """Existing paths under ``root`` (absolute, real) that ``pattern`` names, with the
    policy's glob rules (:func:`plait.domain.policy.glob_match`).

    ``dir/**`` and plain paths give the path itself (a directory then covers everything
    below it, including files created later). Other globs are matched against what exists
    now, descending no deeper than the pattern can match. Symbolic links are never
    followed; a result whose real path leaves ``root`` is dropped (outside the workspace
    is not visible in the sandbox anyway).
    """
    parts = [p for p in pattern.strip("/").split("/") if p not in ("", ".")]
    if not parts or ".." in parts:
        raise ToolError(f"sandbox path pattern {pattern!r} must stay inside the workspace")
    fixed: list[str] = []
    while parts and not _has_magic(parts[0]):
        fixed.append(parts.pop(0))
    base = os.path.join(root, *fixed)
    if not parts or parts == ["**"]:
        return [p for p in [_real_inside(root, base)] if p is not None]
    if not os.path.isdir(base) or os.path.islink(base):
        return []
    full_pattern = "/".join([*fixed, *parts])
    depth = None if any("**" in p for p in parts) else len(parts)
    found: list[str] = []
    seen = 0
    for dirpath, dirnames, filenames in os.walk(base):
        level = 0 if dirpath == base else os.path.relpath(dirpath, base).count("/") + 1
        if depth is not None and level + 1 >= depth:
            dirnames_to_match, dirnames[:] = list(dirnames), []
        else:
            dirnames_to_match = dirnames
        for name in (*dirnames_to_match, *filenames):
            seen += 1
            full = os.path.join(dirpath, name)
            if glob_match(os.path.relpath(full, root), full_pattern):
                real = _real_inside(root, full)
                if real is not None:
                    found.append(real)
        if len(found) > _MAX_MATCHES or seen > _MAX_WALK:
            raise ToolError(
                f"sandbox path pattern {pattern!r} matches or needs to search too many paths "
                "to bind them one by one; name their directory (like 'dir/**') instead"
            )
    return found


def _real_inside(root: str, path: str) -> str | None:
    if not os.path.lexists(path):
        return None
    real = os.path.realpath(path)
    return real if _under(real, root) else None


def _under(path: str, top: str) -> bool:
    return path == top or path.startswith(top.rstrip("/") + "/")


@functools.lru_cache(maxsize=1)
def _private_etc() -> tuple[tuple[str, bool], ...]:
    """Entries of /etc others may not read (shadow, ssh host keys, sudoers, ...) as
    (path, is_dir): the sandbox's root owns the host's root files, so they are masked."""
    masks: list[tuple[str, bool]] = []
    for dirpath, dirnames, filenames in os.walk("/etc"):
        for name in list(dirnames):
            full = os.path.join(dirpath, name)
            st = os.lstat(full)
            if not stat.S_ISLNK(st.st_mode) and st.st_mode & 0o005 != 0o005:
                masks.append((full, True))
                dirnames.remove(name)
        for name in filenames:
            full = os.path.join(dirpath, name)
            st = os.lstat(full)
            if stat.S_ISREG(st.st_mode) and not st.st_mode & 0o004:
                masks.append((full, False))
    return tuple(masks)


def _mask(path: str, is_dir: bool) -> list[str]:
    if is_dir:
        return ["--tmpfs", path, "--remount-ro", path]
    return ["--ro-bind", "/dev/null", path]


def _system() -> list[str]:
    args: list[str] = []
    for directory in _SYSTEM_DIRS:
        if os.path.islink(directory):
            args += ["--symlink", os.readlink(directory), directory]
        elif os.path.isdir(directory):
            args += ["--ro-bind", directory, directory]
    for path, is_dir in _private_etc():
        args += _mask(path, is_dir)
    return [*args, "--dev", "/dev", "--proc", "/proc", "--perms", "1777", "--tmpfs", "/tmp"]


def _read_only_parents(paths: Iterable[str]) -> list[str]:
    """Directories bwrap makes in the private /tmp to reach a bind below it, made
    read-only, so ``..`` from the workspace finds nothing to write to (the root is
    remounted read-only at the end)."""
    args: list[str] = []
    made: set[str] = set()
    for path in paths:
        if not path.startswith("/tmp/"):
            continue
        parts = path.split("/")[2:-1]
        for depth in range(1, len(parts) + 1):
            parent = "/tmp/" + "/".join(parts[:depth])
            if parent not in made:
                made.add(parent)
                args += ["--perms", "0555", "--dir", parent]
    return args


# --- the command line -----------------------------------------------------------------------


def refuse_system_workspace(workspace: str) -> None:
    """A sandboxed command never runs in a workspace that holds the system's directories
    (``/``, say): binding it writable would hand them to the command. Checked before
    anything reads the workspace (the git scan walks all of it)."""
    root = os.path.realpath(workspace)
    if any(_under(d, root) for d in _SYSTEM_DIRS):
        raise ToolError(
            f"the workspace {root!r} contains system directories; commands can only run "
            "in a project directory"
        )


@record(kw_only=True)
class Mounts:
    """What a workspace's sandbox binds, all as real absolute paths. ``pinned`` are the
    writable directories that lead to a read-only or hidden path: each is bound onto
    itself, and a mount point cannot be renamed, removed or replaced (``EBUSY``), so no
    command can move a protected path away and put another in its place."""

    workspace: str
    read_only: tuple[str, ...]
    hidden: tuple[tuple[str, bool], ...]
    pinned: tuple[str, ...] = ()


def plan_mounts(
    settings: SandboxSettings,
    workspace: str,
    protected: Sequence[str],
    *,
    git: Iterable[str] = (),
) -> Mounts:
    """Resolve the policy globs and protected paths against the workspace as it is now.
    ``git`` names the workspace's git places (relative paths, see
    :func:`plait.adapters.tools._git.scan_git`), which are bound read-only."""
    root = os.path.realpath(workspace)
    refuse_system_workspace(root)
    read_only: list[str] = []
    for pattern in settings.read_only_paths:
        read_only += expand_glob(root, pattern)
    # A link named .git stays as it is: binding would follow it (a new target for it is
    # a new git place, undone after the command).
    places = [os.path.join(root, rel) for rel in git if rel != "."]
    read_only += [p for p in places if not os.path.islink(p)]
    hidden: list[str] = []
    for pattern in settings.hidden_paths:
        hidden += [pattern] if pattern.startswith("/") else expand_glob(root, pattern)
    writable = [root, *(os.path.realpath(p) for p in settings.extra_rw_binds)]
    for path in protected:
        _placeholder(path, protected, writable)
    hidden += protected
    shown = [root, *settings.extra_ro_binds, *settings.extra_rw_binds, *_SYSTEM_DIRS]
    masks: dict[str, bool] = {}
    for path in hidden:
        if not os.path.lexists(path):
            continue
        real = os.path.realpath(path)
        if _under(root, real):
            raise ToolError(
                "the workspace lies inside a path the sandbox must hide (plait's store or a "
                "hidden policy path); use a workspace outside it"
            )
        if any(_under(real, os.path.realpath(s)) for s in shown):
            masks[real] = os.path.isdir(real)
    return Mounts(
        workspace=root,
        read_only=tuple(dict.fromkeys(read_only)),
        hidden=tuple(masks.items()),
        pinned=_pins([*read_only, *masks], writable),
    )


def _placeholder(path: str, protected: Sequence[str], writable: Sequence[str]) -> None:
    """Create plait's store file ``path`` empty when it is missing beside another store
    file that exists, in a directory a command can write to (a SQLite ``-journal`` beside
    a database in the workspace), so it can be hidden like the rest: a command could
    otherwise plant one, which SQLite would play back into the database. An empty one is
    no journal (nor WAL); it is left in place."""
    if os.path.lexists(path):
        return
    siblings = [p for p in protected if p != path and os.path.dirname(p) == os.path.dirname(path)]
    if not any(os.path.isfile(p) and not os.path.islink(p) for p in siblings):
        return
    parent = os.path.realpath(os.path.dirname(path))
    if not any(_under(parent, top) for top in writable):
        return
    try:
        fd = os.open(parent, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return
    try:
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        os.close(os.open(os.path.basename(path), flags, 0o600, dir_fd=fd))
    except FileExistsError:
        pass
    finally:
        os.close(fd)


def _pins(paths: Iterable[str], writable: Sequence[str]) -> tuple[str, ...]:
    """The directories strictly between a writable bind and each of ``paths`` under it,
    parents before children."""
    pins: set[str] = set()
    for path in paths:
        for top in writable:
            if path != top and _under(path, top):
                parent = os.path.dirname(path)
                while parent != top and _under(parent, top):
                    pins.add(parent)
                    parent = os.path.dirname(parent)
    return tuple(sorted(pins, key=lambda pin: (pin.count("/"), pin)))


def bwrap_options(
    settings: SandboxSettings, mounts: Mounts, *, cwd: str, network: bool
) -> list[str]:
    """bwrap's options (everything but the program and the command) for running in
    ``cwd`` (a real path in the workspace). They name hidden paths, so they are handed to
    bwrap through a file descriptor (``--args``), never on its command line, which every
    process in the sandbox can read in ``/proc/1/cmdline``."""
    binds = [*settings.extra_ro_binds, *settings.extra_rw_binds, mounts.workspace]
    args = [*_system(), *_read_only_parents(binds)]
    for path in settings.extra_ro_binds:
        args += ["--ro-bind-try", path, path]
    for path in settings.extra_rw_binds:
        args += ["--bind-try", path, path]
    args += ["--bind", mounts.workspace, mounts.workspace]
    for path in mounts.pinned:
        args += ["--bind", path, path]
    for path in mounts.read_only:
        args += ["--ro-bind", path, path]
    for path, is_dir in mounts.hidden:
        args += _mask(path, is_dir)
    args += ["--remount-ro", "/", *_NAMESPACES]
    if not network:
        args.append("--unshare-net")
    # bwrap passes on its own environment, which is already only sandbox_env().
    return [*args, "--chdir", cwd]


def bwrap_argv(settings: SandboxSettings, *, command: Iterable[str], args_fd: int) -> list[str]:
    """The bwrap command line running ``command``; its options are read from
    ``args_fd``, which holds :func:`bwrap_options` (see :func:`args_data`)."""
    return [settings.bwrap, "--args", str(args_fd), "--", *command]


def args_data(options: Iterable[str]) -> bytes:
    """``options`` as bwrap's ``--args`` reads them: each followed by a NUL byte."""
    out = bytearray()
    for option in options:
        if "\0" in option:
            raise ToolError("a sandbox path contains a NUL character")
        out += os.fsencode(option) + b"\0"
    return bytes(out)
