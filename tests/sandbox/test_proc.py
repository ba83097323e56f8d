"""How a process ended, and which rlimits a child gets (pure parts of the runner)."""

from __future__ import annotations

import resource
import signal

import pytest

from plait.adapters.tools import Limits, _proc
from plait.adapters.tools._proc import PidsCgroup


@pytest.mark.parametrize(
    ("code", "timed_out", "hit", "expected"),
    [
        (0, False, False, (0, "exit", None, None)),
        (3, False, False, (3, "exit", None, None)),
        (128 + 9, False, False, (None, "signal", "SIGKILL", None)),
        (-15, False, False, (None, "signal", "SIGTERM", None)),
        (128 + 24, False, False, (None, "limit", "SIGXCPU", "cpu")),
        (1, False, True, (1, "exit", None, "processes")),
        (128 + 9, True, True, (None, "timeout", None, "processes")),
        (255, False, False, (255, "exit", None, None)),
    ],
)
def test_outcome(code: int, timed_out: bool, hit: bool, expected: tuple[object, ...]) -> None:
    assert _proc._outcome(code, shell_codes=True, timed_out=timed_out, hit_procs=hit) == expected


def test_rlimits_for_an_ordinary_user(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("os.getuid", lambda: 4242)
    monkeypatch.setattr(_proc, "_user_process_count", lambda uid: 30)
    limits = Limits(cpu_seconds=5, address_space_bytes=1 << 30, max_processes=50)
    spec, note = _proc._rlimits(limits, None)
    assert note is None
    assert spec.cgroup_procs is None
    assert spec.values == (
        (resource.RLIMIT_CPU, 5, 10),
        (resource.RLIMIT_AS, 1 << 30, 1 << 30),
        (resource.RLIMIT_NPROC, 80, 80),  # on top of what the user already runs
    )


def test_rlimits_for_root_without_a_cgroup_say_the_limit_is_not_enforced(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("os.getuid", lambda: 0)
    spec, note = _proc._rlimits(Limits(max_processes=50, file_size_bytes=10), None)
    assert note is not None and "process limit not enforced" in note
    assert (resource.RLIMIT_FSIZE, 10, 10) in spec.values
    assert all(which != resource.RLIMIT_NPROC for which, _, _ in spec.values)


def test_rlimits_with_a_cgroup_join_it() -> None:
    spec, note = _proc._rlimits(Limits(max_processes=50), PidsCgroup("/sys/fs/cgroup/pids/x"))
    assert note is None
    assert spec.cgroup_procs == "/sys/fs/cgroup/pids/x/cgroup.procs"
    assert all(which != resource.RLIMIT_NPROC for which, _, _ in spec.values)


def test_signal_names() -> None:
    assert _proc._signal_name(signal.SIGKILL) == "SIGKILL"
    assert _proc._signal_name(99) == "signal 99"
