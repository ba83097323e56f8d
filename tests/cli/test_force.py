"""A run whose process died but whose lease has not expired: ``runs recover`` and ``runs
cancel`` say when the lease expires and take ``--force``, refused while the holder is a
live process on this host."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from plait.adapters.system import owner_alive, process_owner
from plait.testing import FixedClock
from tests.cli.conftest import Plait, snapshot, write_script
from tests.cli.test_recovery_flow import READ_SCRIPT, crash


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def _held(plait: Plait, workspace: Path, tmp_path: Path, owner: str) -> tuple[str, str]:
    model = write_script(tmp_path, "read", READ_SCRIPT)
    c = crash(
        plait.db,
        workspace,
        model,
        "user_saved",
        clock=FixedClock(time.time()),
        lease_seconds=3600,
        owner=owner,
    )
    return c.run_id, model


def test_owner_names_carry_host_and_pid() -> None:
    me = process_owner()
    assert me.startswith(f"worker@{socket.gethostname()}:")
    assert owner_alive(me) is True
    assert owner_alive(f"worker@{socket.gethostname()}:{_dead_pid()}:x") is False
    assert owner_alive("worker@elsewhere.example:1:x") is None
    assert owner_alive("dead-worker") is None
    # names no worker writes, but a store may hold (Runtime.open takes any owner): never
    # an error, and never this process group (pid 0) or an out-of-range id
    here = socket.gethostname()
    for pid in ("0", "99999999999999999999", "-5", "\u0661\u0662", " 12", ""):
        assert owner_alive(f"worker@{here}:{pid}:x") is None, pid


def test_a_killed_process_not_yet_reaped_counts_as_gone() -> None:
    """Right after a kill the process may linger as a zombie until its parent reaps it:
    ``--force`` need not wait for that."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        child.kill()
        deadline = time.monotonic() + 10
        stat = Path(f"/proc/{child.pid}/stat")
        while not stat.read_text().rsplit(")", 1)[1].startswith(" Z"):
            assert time.monotonic() < deadline, "the child never became a zombie"
            time.sleep(0.01)
        assert owner_alive(f"worker@{socket.gethostname()}:{child.pid}:x") is False
    finally:
        child.wait()


def test_recover_says_when_the_lease_expires_and_force_takes_over(
    plait: Plait, workspace: Path, tmp_path: Path
) -> None:
    owner = f"worker@{socket.gethostname()}:{_dead_pid()}:gone"
    run_id, model = _held(plait, workspace, tmp_path, owner)
    waiting = plait.ok("runs", "recover", "--model", model).out.splitlines()
    assert waiting[0] == "no run needs recovery"
    assert waiting[1].startswith(f"run {run_id} is held by {owner} until ")
    assert (
        f", a process of this host that is no longer running: 'plait runs recover --run "
        f"{run_id} --force' does it now, else 'plait runs recover' takes the run over once "
        "the lease has expired"
    ) in waiting[1], waiting[1]

    # Named without --force: left alone (its lease), and told the same.
    named = plait("runs", "recover", "--run", run_id, "--model", model)
    assert named.code == 0, named.err
    skipped, hint = named.out.splitlines()
    assert skipped.startswith(f"{run_id}: skipped (run {run_id!r} is leased to {owner!r} until ")
    assert hint.startswith(f"run {run_id} is held by {owner} until "), hint
    assert hint.endswith(waiting[1][waiting[1].index(" s), a process") :]), hint
    assert plait.json("runs", "show", run_id)["status"] == "running"

    forced = plait("runs", "recover", "--run", run_id, "--force", "--model", model, "--json")
    assert forced.code == 0, forced.err
    (report,) = forced.json["recoveries"]
    assert report["outcome"] == "resumed"
    assert report["run"]["status"] == "completed"


def test_force_needs_a_run(plait: Plait, workspace: Path, tmp_path: Path) -> None:
    _held(plait, workspace, tmp_path, "dead-worker")
    r = plait("runs", "recover", "--force", "--model", write_script(tmp_path, "x", READ_SCRIPT))
    assert r.code == 2
    assert r.err.splitlines()[0] == (
        "plait: error: --force takes over one run: name it with --run RUN"
    )


def test_recover_names_a_holder_still_running_here(
    plait: Plait, workspace: Path, tmp_path: Path
) -> None:
    alive = f"worker@{socket.gethostname()}:{os.getpid()}:me"
    run_id, model = _held(plait, workspace, tmp_path, alive)
    for argv in (("runs", "recover"), ("runs", "recover", "--run", run_id)):
        hint = plait.ok(*argv, "--model", model).out.splitlines()[-1]
        assert hint.startswith(f"run {run_id} is held by {alive} until "), hint
        assert hint.endswith(
            ", a process still running on this host: it carries the run on ('plait runs "
            "recover' takes the run over if it stops and its lease expires)"
        ), hint
        assert "--force" not in hint
    assert plait.json("runs", "show", run_id)["status"] == "running"


@pytest.mark.parametrize("command", ["recover", "cancel"])
def test_force_is_refused_while_the_holder_runs_here(
    plait: Plait, workspace: Path, tmp_path: Path, command: str
) -> None:
    alive = f"worker@{socket.gethostname()}:{os.getpid()}:me"
    run_id, model = _held(plait, workspace, tmp_path, alive)
    before = snapshot(plait.db)
    argv = ["runs", "recover", "--run", run_id, "--model", model]
    if command == "cancel":
        argv = ["runs", "cancel", run_id]
    r = plait(*argv, "--force", "--json")
    assert r.code == 2
    assert r.json["error"]["code"] == "run_state"
    assert "a process that is still running on this host" in r.json["error"]["message"]
    assert snapshot(plait.db) == before


def test_cancel_force_ends_a_dead_process_run(
    plait: Plait, workspace: Path, tmp_path: Path
) -> None:
    run_id, _ = _held(plait, workspace, tmp_path, "dead-worker")
    asked = plait.ok("runs", "cancel", run_id).out.splitlines()
    assert asked[1].endswith(f"'plait runs cancel {run_id} --force' does it now")
    forced = plait.json("runs", "cancel", run_id, "--force")
    assert forced["status"] == "cancelled"
    (session,) = plait.json("sessions", "list")["sessions"]
    assert session["active_run_id"] is None
