"""Recovery removes the temporary files of interrupted atomic writes (older than the dead
process's lease), and leaves a live writer's fresh ones alone."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from plait.adapters.stores.memory.store import MemoryStore
from plait.adapters.tools.leftovers import WorkspaceLeftovers
from plait.testing import FixedClock
from tests.application.conftest import make_rig, reply, run
from tests.application.test_recovery import Died, _ids, die_at


def test_recovery_sweeps_stale_temporary_files(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    (ws / "sub").mkdir(parents=True)
    (ws / ".git").mkdir()
    store, clock = MemoryStore(), FixedClock(start=2_000_000_000.0)
    first = make_rig([], store=store, clock=clock, checkpoint=die_at("user_saved"))
    s = run(first.service.create_session(workspace=str(ws)))
    with pytest.raises(Died):
        run(first.service.send(s.id, "go"))
    (crashed,) = run(store.list_runs())
    assert crashed.lease is not None
    stale = ws / "sub" / ".plait-0123456789abcdef.tmp"
    fresh = ws / ".plait-fedcba9876543210.tmp"  # a live writer's, after the lease ended
    in_git = ws / ".git" / ".plait-0000000000000000.tmp"
    other = ws / "notes.tmp"
    for p in (stale, fresh, in_git, other):
        p.write_text("x")
    os.utime(stale, (crashed.lease.expires_at - 10, crashed.lease.expires_at - 10))
    os.utime(fresh, (crashed.lease.expires_at + 10, crashed.lease.expires_at + 10))
    os.utime(other, (0, 0))
    clock.advance(61)
    second = make_rig(
        [reply("done")], store=store, clock=clock, ids=_ids(), sweeper=WorkspaceLeftovers()
    )
    (report,) = run(second.service.recover())
    assert report.outcome == "resumed"
    assert not stale.exists()
    assert fresh.exists() and in_git.exists() and other.exists()
