"""Run one process tree with limits, a wall-clock timeout and streamed, capped output.

Each stream is written to a spool file as it arrives; only a bounded head and tail stay
in memory. On timeout (or cancellation) the whole tree is killed: the process group, the
members of its pids cgroup, and, under bubblewrap, the PID namespace (which dies with its
first process).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import resource
import secrets
import signal
import subprocess
import time
from collections.abc import Callable
from typing import Literal

from plait.adapters.tools._settings import Limits
from plait.domain.errors import ToolError
from plait.domain.record import record

__all__ = ["Capture", "Outcome", "PidsCgroup", "run_process"]

Ended = Literal["exit", "signal", "timeout", "limit"]
_CHUNK = 65536
_DRAIN_SECONDS = 5.0
"""How long output may keep flowing after the tree was killed or its leader exited."""


class Capture:
    """One output stream: every byte to ``path`` (an existing file of ours, e.g. from
    ``mkstemp``), the first and last bytes in memory."""

    def __init__(self, path: str, keep: int) -> None:
        self.path = path
        self.size = 0
        self._keep_head = keep // 2
        self._keep_tail = keep - self._keep_head
        self.head = bytearray()
        self._tail = bytearray()
        self._fd = os.open(path, os.O_WRONLY | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC)

    @property
    def tail(self) -> bytes:
        """The last bytes not already in ``head``."""
        return bytes(self._tail)

    @property
    def truncated(self) -> bool:
        return self.size > len(self.head) + len(self._tail)

    def feed(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            view = view[os.write(self._fd, view) :]
        self.size += len(data)
        room = self._keep_head - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if data and self._keep_tail:
            self._tail += data
            if len(self._tail) > self._keep_tail:
                del self._tail[: len(self._tail) - self._keep_tail]

    async def pump(self, stream: asyncio.StreamReader) -> None:
        while chunk := await stream.read(_CHUNK):
            self.feed(chunk)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


class PidsCgroup:
    """A pids cgroup of its own (v1 ``pids`` hierarchy or a v2 root with ``pids``)."""

    def __init__(self, path: str) -> None:
        self.path = path

    @classmethod
    def create(cls, max_processes: int) -> PidsCgroup | None:
        """A fresh cgroup limited to ``max_processes``, or None where plait may not make one."""
        for base in ("/sys/fs/cgroup/pids", "/sys/fs/cgroup"):
            if not os.path.exists(os.path.join(base, "cgroup.procs")):
                continue
            if base == "/sys/fs/cgroup" and not _v2_has_pids(base):
                continue
            path = os.path.join(base, f"plait-{os.getpid()}-{secrets.token_hex(4)}")
            try:
                os.mkdir(path, 0o755)
            except OSError:
                continue
            try:
                with open(os.path.join(path, "pids.max"), "w") as limit_file:
                    limit_file.write(str(max_processes))
            except OSError:
                with contextlib.suppress(OSError):
                    os.rmdir(path)
                continue
            return cls(path)
        return None

    @property
    def procs_file(self) -> str:
        return os.path.join(self.path, "cgroup.procs")

    def hit_limit(self) -> bool:
        """Whether a fork was refused because of ``pids.max``."""
        try:
            with open(os.path.join(self.path, "pids.events")) as events_file:
                for line in events_file:
                    key, _, count = line.partition(" ")
                    if key == "max" and int(count) > 0:
                        return True
        except (OSError, ValueError):
            pass
        return False

    def kill_all(self) -> None:
        with contextlib.suppress(OSError):
            with open(self.procs_file) as procs:
                pids = [int(p) for p in procs.read().split()]
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)

    async def remove(self) -> None:
        for _ in range(50):
            self.kill_all()
            try:
                os.rmdir(self.path)
                return
            except FileNotFoundError:
                return
            except OSError:
                await asyncio.sleep(0.05)


def _v2_has_pids(base: str) -> bool:
    try:
        with open(os.path.join(base, "cgroup.subtree_control")) as control_file:
            return "pids" in control_file.read().split()
    except OSError:
        return False


def _user_process_count(uid: int) -> int:
    count = 0
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError):
                if os.stat(f"/proc/{entry}").st_uid == uid:
                    count += 1
    return count


@record
class _Rlimits:
    values: tuple[tuple[int, int, int], ...]
    cgroup_procs: str | None


def _rlimits(limits: Limits, cgroup: PidsCgroup | None) -> tuple[_Rlimits, str | None]:
    """The rlimits to set in the child, and a note when the process limit cannot hold."""
    values: list[tuple[int, int, int]] = []
    if limits.cpu_seconds is not None:
        # SIGXCPU at the soft limit (reported as the CPU limit), SIGKILL a little later.
        values.append((resource.RLIMIT_CPU, limits.cpu_seconds, limits.cpu_seconds + 5))
    if limits.address_space_bytes is not None:
        limit = limits.address_space_bytes
        values.append((resource.RLIMIT_AS, limit, limit))
    if limits.file_size_bytes is not None:
        limit = limits.file_size_bytes
        values.append((resource.RLIMIT_FSIZE, limit, limit))
    note = None
    if limits.max_processes is not None and cgroup is None:
        uid = os.getuid()
        if uid == 0:
            note = "process limit not enforced (root, and no pids cgroup could be made)"
        else:
            limit = limits.max_processes + _user_process_count(uid)
            values.append((resource.RLIMIT_NPROC, limit, limit))
    procs = cgroup.procs_file if cgroup else None
    return _Rlimits(tuple(values), procs), note


def _preexec(spec: _Rlimits) -> Callable[[], None]:
    def setup() -> None:  # runs in the child between fork and exec: os calls only
        if spec.cgroup_procs is not None:
            fd = os.open(spec.cgroup_procs, os.O_WRONLY)
            try:
                os.write(fd, str(os.getpid()).encode())
            finally:
                os.close(fd)
        for which, soft, hard in spec.values:
            resource.setrlimit(which, (soft, hard))

    return setup


@record(kw_only=True)
class Outcome:
    """How a command ended. ``exit_code`` is None when it was killed by a signal."""

    exit_code: int | None
    ended: Ended
    signal: str | None
    limit: str | None
    """Which limit ended it or was hit: ``cpu``, ``processes``."""
    seconds: float
    notes: tuple[str, ...]


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _outcome(
    code: int, *, shell_codes: bool, timed_out: bool, hit_procs: bool
) -> tuple[int | None, Ended, str | None, str | None]:
    """bwrap and sh report a child killed by signal N as exit code 128+N."""
    sig: int | None = None
    if code < 0:
        sig = -code
    elif shell_codes and 128 < code < 128 + 65:
        sig = code - 128
    limit = "processes" if hit_procs else None
    if sig == signal.SIGXCPU:
        limit = "cpu"
    if timed_out:
        return None, "timeout", None, limit
    if sig is not None:
        ended: Ended = "limit" if sig == signal.SIGXCPU else "signal"
        return None, ended, _signal_name(sig), limit
    return code, "exit", None, limit


async def run_process(
    argv: list[str],
    *,
    cwd: str,
    env: dict[str, str],
    limits: Limits,
    wall_seconds: float,
    stdout: Capture,
    stderr: Capture,
    shell_codes: bool,
    pass_fds: tuple[int, ...] = (),
) -> Outcome:
    """Run ``argv`` to its end or for ``wall_seconds``, streaming into the two captures
    (``pass_fds``: descriptors the process inherits)."""
    cgroup = PidsCgroup.create(limits.max_processes) if limits.max_processes else None
    spec, note = _rlimits(limits, cgroup)
    started = time.monotonic()
    spawn = asyncio.ensure_future(
        asyncio.create_subprocess_exec(
            *argv,
            cwd=cwd,
            env=env,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,
            preexec_fn=_preexec(spec),
            pass_fds=pass_fds,
        )
    )
    cancelled = False
    try:
        while True:
            # Never cancelled half-way: asyncio's own clean-up of a cancelled start kills
            # the leader only, then waits for its pipes, which the sandboxed command still
            # holds: a Ctrl-C there waited for the whole command (a `sleep 60`). The start
            # is let finish (it has forked already; only its pipes are being connected)
            # and the cancellation is acted on below, killing the tree as for any call.
            try:
                proc = await asyncio.shield(spawn)
                break
            except asyncio.CancelledError:
                if spawn.cancelled():
                    raise
                cancelled = True
    except BaseException as exc:
        if cgroup:
            await cgroup.remove()
        if cancelled:  # and the start failed: nothing ran
            raise asyncio.CancelledError from exc
        if isinstance(exc, OSError | subprocess.SubprocessError):
            # The program was never started (E2BIG, a missing bwrap, ...): nothing ran.
            raise ToolError(f"the command could not be started: {exc}") from exc
        raise
    assert proc.stdout is not None
    assert proc.stderr is not None
    pumps = asyncio.gather(stdout.pump(proc.stdout), stderr.pump(proc.stderr))
    try:
        if cancelled:
            raise asyncio.CancelledError
        timed_out = await _wait(proc, wall_seconds, cgroup)
        # Output still held open by leftovers (only possible unsandboxed) is cut off:
        # _finish reads what is left for at most _DRAIN_SECONDS.
        _kill_tree(proc, cgroup)
    finally:
        hit = await _finish(proc, pumps, cgroup)
        stdout.close()
        stderr.close()
    assert proc.returncode is not None
    exit_code, ended, sig, limit = _outcome(
        proc.returncode, shell_codes=shell_codes, timed_out=timed_out, hit_procs=hit
    )
    return Outcome(
        exit_code=exit_code,
        ended=ended,
        signal=sig,
        limit=limit,
        seconds=time.monotonic() - started,
        notes=(note,) if note else (),
    )


async def _finish(
    proc: asyncio.subprocess.Process,
    pumps: asyncio.Future[tuple[None, None]],
    cgroup: PidsCgroup | None,
) -> bool:
    """Make sure nothing is left running or reading; True when the process limit was hit."""
    if proc.returncode is None:
        _kill_tree(proc, cgroup)
    # The pumps read what the killed tree left in its pipes, to their end (at once, unless
    # a leftover outside the tree holds them). Cancelled while output was still waiting
    # (a call cancelled or timed out mid-output), the pipes stayed paused, their end was
    # never seen, and ``proc.wait()``, which in 3.11 waits for the pipes too, never came
    # back: the cancellation of a `yes` hung.
    with contextlib.suppress(TimeoutError, asyncio.CancelledError):
        await asyncio.wait_for(asyncio.shield(pumps), _DRAIN_SECONDS)
    pumps.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await pumps
    if proc.returncode is None:
        await asyncio.shield(proc.wait())
    hit = cgroup.hit_limit() if cgroup else False
    if cgroup:
        await cgroup.remove()
    return hit


async def _wait(
    proc: asyncio.subprocess.Process, wall_seconds: float, cgroup: PidsCgroup | None
) -> bool:
    """Wait for the leader; on timeout kill the tree. True when it timed out."""
    try:
        await asyncio.wait_for(asyncio.shield(proc.wait()), wall_seconds)
        return False
    except TimeoutError:
        _kill_tree(proc, cgroup)
        await proc.wait()
        return True


def _kill_tree(proc: asyncio.subprocess.Process, cgroup: PidsCgroup | None) -> None:
    # The leader started its own session, so its pid is its process group id; the group
    # id stays reserved while any member lives, so this reaches only leftovers of ours.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    if cgroup:
        cgroup.kill_all()
