"""A command cancelled while it is being started (a Ctrl-C as bwrap starts) is ended at
once, its whole tree with it.

asyncio's own clean-up of a cancelled ``create_subprocess_exec`` kills the leader only and
then waits for the process's pipes, which a child of the leader still holds: ``plait
chat`` sat on its spinner for the whole of a sandboxed ``sleep 60`` after a Ctrl-C that
landed there (seen in CI, and on a loaded host one time in five)."""

from __future__ import annotations

import asyncio
import os
import tempfile
import time
from pathlib import Path

import pytest

from plait.adapters.tools._proc import Capture, run_process
from plait.adapters.tools._settings import Limits


def _capture(tmp_path: Path, name: str) -> Capture:
    fd, path = tempfile.mkstemp(dir=tmp_path, prefix=name)
    os.close(fd)
    return Capture(path, 1024)


async def _cancelled_while_starting(tmp_path: Path, marker: Path) -> float:
    """Cancel ``run_process`` at its first suspension (the process is forked, its pipes
    not yet connected); how long the cancellation took to come back."""
    # the leader's child (a subshell) holds the pipes; it writes the marker after 2 s
    script = f"(sleep 2; touch {marker}) & wait"
    task = asyncio.ensure_future(
        run_process(
            ["sh", "-c", script],
            cwd=str(tmp_path),
            env={"PATH": os.environ["PATH"]},
            limits=Limits(max_processes=None),
            wall_seconds=30,
            stdout=_capture(tmp_path, "out"),
            stderr=_capture(tmp_path, "err"),
            shell_codes=True,
        )
    )
    await asyncio.sleep(0)  # the task runs up to its first await: the fork is done
    assert not task.done()
    start = time.monotonic()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(asyncio.shield(task), 10)
    return time.monotonic() - start


def test_a_command_cancelled_while_it_starts_is_ended_with_its_children(tmp_path: Path) -> None:
    marker = tmp_path / "outlived"
    waited = asyncio.run(_cancelled_while_starting(tmp_path, marker))
    time.sleep(2.5)  # past the child's 2 s: had it survived, it would have written
    assert not marker.exists(), "the leader's child outlived the cancellation"
    # before the fix the cancellation came back only when the child had ended (2 s);
    # this bound is a hang detector, far above the few milliseconds it takes
    assert waited < 1.5, waited


async def _cancelled_mid_output(tmp_path: Path) -> float:
    out = _capture(tmp_path, "out")
    task = asyncio.ensure_future(
        run_process(
            ["sh", "-c", "yes | head -c 100000000; sleep 30"],
            cwd=str(tmp_path),
            env={"PATH": os.environ["PATH"]},
            limits=Limits(max_processes=None),
            wall_seconds=60,
            stdout=out,
            stderr=_capture(tmp_path, "err"),
            shell_codes=True,
        )
    )
    for _ in range(3000):  # until the pipes are full and more is waiting
        if out.size >= 1_000_000:
            break
        await asyncio.sleep(0.01)
    else:
        raise AssertionError("the command wrote nothing")
    start = time.monotonic()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(asyncio.shield(task), 20)
    return time.monotonic() - start


def test_a_command_cancelled_mid_output_is_ended(tmp_path: Path) -> None:
    """Cancelled while its output is still flowing (a Ctrl-C, a deadline), a command ends:
    what its killed tree left in the pipes is read to their end, without which the pipes
    stayed paused and the wait for the process never came back."""
    waited = asyncio.run(_cancelled_mid_output(tmp_path))
    assert waited < 10, waited  # a hang detector: it takes milliseconds
