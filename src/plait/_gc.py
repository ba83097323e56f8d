"""Making objects that are kept without making the cyclic GC pay for them.

A session's history is thousands of small objects that are kept for as long as the run
lives. Allocated with the GC on, they are rescanned by every young collection while the
list grows (~25% of a load); with it paused, the first collection afterwards still scans
them all once (~10% of resuming a 5,000-message session). Start-up is the same: the
modules, classes and functions ``Runtime.open`` imports and the runtime it builds live
as long as the process, and the 13 collections they set off cost ~3% of it.
:func:`long_lived` pauses the GC while they are made and then moves what exists to the
oldest generation at once (``gc.freeze()`` then ``gc.unfreeze()``: two list splices, and
the young generation's count starts again from zero), where only a full collection looks
at them.

It sits below the layers (like :mod:`plait._compiled`): the stores and the composition
root use it, nothing in it knows of them.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

__all__ = ["long_lived"]


@contextlib.contextmanager
def long_lived() -> Iterator[None]:
    """Pause the cyclic GC while objects that will be kept are made; afterwards they go
    straight to the oldest generation. An application that froze objects itself keeps
    them frozen (the promotion is skipped then: unfreezing would release them)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if gc.get_freeze_count() == 0:
            gc.freeze()
            gc.unfreeze()
        if enabled:
            gc.enable()
