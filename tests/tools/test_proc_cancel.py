"""A command cancelled while it is being started (a Ctrl-C as bwrap starts) is ended at
once, its whole tree with it.

asyncio's own clean-up of a cancelled ``create_subprocess_exec`` kills the leader only and
then waits for the process's pipes, which a child of the leader still holds: ``plait
chat`` sat on its spinner for the whole of a sandboxed ``sleep 60`` after a Ctrl-C that
landed there (seen in CI, and on a loaded host one time in five)."""

from __future__ import annotations

import asyncio
import gc
import os
import shlex
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import pytest

from plait.adapters.tools._proc import Capture, run_process
from plait.adapters.tools._settings import Limits


def _capture(tmp_path: Path, name: str) -> Capture:
    fd, path = tempfile.mkstemp(dir=tmp_path, prefix=name)
    os.close(fd)
    return Capture(path, 1024)


def _started(tmp_path: Path, script: str, stdout: Capture) -> asyncio.Future[Any]:
    """``sh -c script`` through ``run_process``, as a task (unsandboxed, 60 s at most)."""
    return asyncio.ensure_future(
        run_process(
            ["sh", "-c", script],
            cwd=str(tmp_path),
            env={"PATH": os.environ["PATH"]},
            limits=Limits(max_processes=None),
            wall_seconds=60,
            stdout=stdout,
            stderr=_capture(tmp_path, "err"),
            shell_codes=True,
        )
    )


async def _cancel(task: asyncio.Future[Any]) -> float:
    """Cancel ``task``; how long the cancellation took to come back (20 s at most)."""
    start = time.monotonic()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(asyncio.shield(task), 20)
    return time.monotonic() - start


async def _cancelled_while_starting(tmp_path: Path, marker: Path) -> float:
    """Cancel ``run_process`` at its first suspension (the process is forked, its pipes
    not yet connected)."""
    # the leader's child (a subshell) holds the pipes; it writes the marker after 2 s
    task = _started(tmp_path, f"(sleep 2; touch {marker}) & wait", _capture(tmp_path, "out"))
    await asyncio.sleep(0)  # the task runs up to its first await: the fork is done
    assert not task.done()
    return await _cancel(task)


def test_a_command_cancelled_while_it_starts_is_ended_with_its_children(tmp_path: Path) -> None:
    marker = tmp_path / "outlived"
    waited = asyncio.run(_cancelled_while_starting(tmp_path, marker))
    time.sleep(2.5)  # past the child's 2 s: had it survived, it would have written
    assert not marker.exists(), "the leader's child outlived the cancellation"
    # before the fix the cancellation came back only when the child had ended (2 s);
    # this bound is a hang detector, far above the few milliseconds it takes
    assert waited < 1.5, waited


# 1 MiB written at once into a pipe made that large (F_SETPIPE_SZ), then a long sleep
_FLOOD = (
    "import fcntl, sys, time; fcntl.fcntl(1, 1031, 1 << 20); "
    "sys.stdout.buffer.write(b'x' * (1 << 20)); sys.stdout.flush(); time.sleep(30)"
)


async def _cancelled_mid_output(tmp_path: Path) -> float:
    out = _capture(tmp_path, "out")
    task = _started(tmp_path, f"{shlex.quote(sys.executable)} -c {shlex.quote(_FLOOD)}", out)
    for _ in range(3000):  # until it writes
        if out.size:
            break
        await asyncio.sleep(0.01)
    else:
        raise AssertionError("the command wrote nothing")
    # the loop is held on purpose: it reads nothing, and most of the 1 MiB waits in the pipe
    time.sleep(0.5)  # noqa: ASYNC251
    return await _cancel(task)


def test_a_command_cancelled_mid_output_is_ended_and_closed(tmp_path: Path) -> None:
    """Cancelled while its output is still waiting (a Ctrl-C, a deadline), a command ends
    and leaves nothing open: what its killed tree left in the pipes is read to their end.
    Without it the pipes stayed paused: the wait for the process never came back (when its
    exit was not yet known), or the process's transport was left open (when it was)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        waited = asyncio.run(_cancelled_mid_output(tmp_path))
        gc.collect()
    assert waited < 10, waited  # a hang detector: it takes milliseconds
    assert not [w for w in caught if "unclosed" in str(w.message)]
