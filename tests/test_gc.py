"""long_lived: what is made inside goes to the GC's oldest generation, not rescanned young."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import importlib
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import CodeType, FrameType

import pytest

import plait
from plait._gc import long_lived
from plait.runtime import Runtime
from plait.settings import resolve_settings


class Node:
    def __init__(self, n: int) -> None:
        self.n = n


@pytest.mark.slow
def test_objects_made_inside_go_to_the_oldest_generation() -> None:
    gc.collect()
    with long_lived():
        assert not gc.isenabled()
        kept = [Node(i) for i in range(5_000)]
    assert gc.isenabled()
    assert gc.get_count()[0] < 100  # the young generation starts again (5,000 were made)
    oldest = {id(o) for o in gc.get_objects(generation=2)}
    assert all(id(o) in oldest for o in kept)


def test_a_paused_gc_stays_paused() -> None:
    gc.disable()
    try:
        with long_lived():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()


@pytest.mark.slow
def test_objects_the_application_froze_stay_frozen() -> None:
    gc.collect()
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        assert frozen > 0
        with long_lived():
            kept = [Node(i) for i in range(100)]
        assert gc.get_freeze_count() == frozen
        assert kept
    finally:
        gc.unfreeze()


@contextlib.contextmanager
def collections_inside(code: CodeType) -> Iterator[list[int]]:
    """The generations of the collections made meanwhile while ``code`` runs (a frame of
    it is on the stack), with a threshold that makes one at every allocation the GC
    tracks while it is on; and of all collections made meanwhile, in ``all_made``."""
    inside: list[int] = []

    def note(phase: str, info: dict[str, int]) -> None:
        if phase != "start":
            return
        all_made.append(info["generation"])
        frame: FrameType | None = sys._getframe(1)
        while frame is not None:
            if frame.f_code is code:
                inside.append(info["generation"])
                return
            frame = frame.f_back

    threshold = gc.get_threshold()
    gc.callbacks.append(note)
    gc.set_threshold(1)
    try:
        yield inside
    finally:
        gc.set_threshold(*threshold)
        gc.callbacks.remove(note)


all_made: list[int] = []


def test_runtime_open_makes_no_collection_and_leaves_the_gc_as_it_found_it(
    tmp_path: Path,
) -> None:
    settings = resolve_settings(db="memory://", env={}, cwd=tmp_path)
    opening = Runtime.open.__func__.__wrapped__.__code__  # type: ignore[attr-defined]
    all_made.clear()
    building = Runtime.service.func.__wrapped__.__code__  # type: ignore[attr-defined]
    with collections_inside(opening) as inside:
        runtime = Runtime.open(settings=settings, mcp_servers={})
        assert gc.isenabled()
    with collections_inside(building) as inside_service:
        assert runtime.service is runtime.service  # built at its first use, kept
    asyncio.run(runtime.close())
    assert inside == [] and inside_service == []
    assert all_made  # the threshold did make collections, outside them


def test_runtime_open_keeps_a_paused_gc_paused(tmp_path: Path) -> None:
    settings = resolve_settings(db="memory://", env={}, cwd=tmp_path)
    gc.disable()
    try:
        runtime = Runtime.open(settings=settings, mcp_servers={})
        assert not gc.isenabled()
        asyncio.run(runtime.close())
    finally:
        gc.enable()


def test_the_public_names_are_imported_once_with_the_gc_paused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``plait.NAME`` imports its module with the GC paused, then keeps the value (a
    module of this test's own stands for one of plait's lazily imported modules)."""
    (tmp_path / "gc_probe_module.py").write_text(
        "kept = [{'n': n} for n in range(1_000)]\nclass Probe:\n    pass\n", encoding="utf-8"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(plait._LAZY, "Probe", "gc_probe_module")
    try:
        with collections_inside(importlib.import_module.__code__) as inside:
            probe = plait.Probe
        assert inside == []
        assert plait.__dict__["Probe"] is probe is sys.modules["gc_probe_module"].Probe
    finally:
        plait.__dict__.pop("Probe", None)
        sys.modules.pop("gc_probe_module", None)


@pytest.mark.slow
def test_the_plait_command_freezes_its_modules_and_leaves_the_gc_on() -> None:
    """What the command imported before it runs is out of the GC's reach (the last
    collection, at exit, does not scan it); the command itself runs with the GC on."""
    script = (
        "import gc, sys\n"
        "import plait.entrypoints.cli.main as main_module\n"
        "def report():\n"
        "    print(gc.get_freeze_count(), gc.isenabled(), len(gc.get_objects()))\n"
        "    return 0\n"
        "main_module.main = report\n"
        "from plait.entrypoints.cli import run\n"
        "run()\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=False, timeout=60
    )
    assert done.returncode == 0, done.stderr
    frozen, enabled, tracked = done.stdout.split()
    assert int(frozen) > 10 * int(tracked) and enabled == "True"
