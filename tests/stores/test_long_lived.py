"""long_lived: a loaded history goes to the GC's oldest generation, not rescanned young."""

from __future__ import annotations

import gc

import pytest

from plait.adapters.stores.shared.long_lived import long_lived


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
