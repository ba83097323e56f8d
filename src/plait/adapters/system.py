"""The real clock, id generator and process identity."""

from __future__ import annotations

import os
import socket
import time
from _random import Random  # random's generator itself; the random module costs ~1 ms

__all__ = ["RandomIds", "SystemClock", "owner_alive", "process_owner"]


def process_owner() -> str:
    """A lease owner name that says where the process runs: ``worker@HOST:PID:RANDOM``."""
    return f"worker@{socket.gethostname()}:{os.getpid()}:{os.urandom(4).hex()}"


_PID_MAX = 2**22  # Linux's largest pid_max


def owner_alive(owner: str) -> bool | None:
    """Whether the process named by a :func:`process_owner` name still runs: None when
    that cannot be told (another host, or a name of another form)."""
    name, at, rest = owner.partition("@")
    host, _, tail = rest.partition(":")
    pid_text = tail.partition(":")[0]
    if not at or name != "worker" or host != socket.gethostname() or not pid_text.isascii():
        return None
    if not pid_text.isdigit() or not 0 < int(pid_text) <= _PID_MAX:
        return None  # no process's id (0 would name this process group)
    pid = int(pid_text)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # it exists, under another user
    return not _zombie(pid)


def _zombie(pid: int) -> bool:
    """A killed process its parent has not reaped yet (Linux; elsewhere: no)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat_file:
            stat = stat_file.read()
    except OSError:
        return False
    return stat[stat.rfind(b")") + 2 : stat.rfind(b")") + 3] in (b"Z", b"X")


class SystemClock:
    def now(self) -> float:
        return time.time()

    def monotonic(self) -> float:
        return time.monotonic()


class RandomIds:
    """Ids that sort by creation time and are unique across processes:
    ``prefix_`` + 12 hex digits of milliseconds + 10 random hex digits.

    The random digits come from a generator seeded from ``os.urandom`` (again in a forked
    child, so parent and child never share a sequence), not from a system call per id: a
    call that releases the GIL hands it to the store's I/O thread and waits to get it back.
    """

    def new(self, prefix: str) -> str:
        return f"{prefix}_{time.time_ns() // 1_000_000:012x}{_bits(40):010x}"


def _seed() -> int:
    return int.from_bytes(os.urandom(32))


_random = Random(_seed())
_bits = _random.getrandbits
os.register_at_fork(after_in_child=lambda: _random.seed(_seed()))
