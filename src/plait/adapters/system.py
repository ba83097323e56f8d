"""The real clock and id generator."""

from __future__ import annotations

import os
import time

__all__ = ["RandomIds", "SystemClock"]


class SystemClock:
    def now(self) -> float:
        return time.time()

    def monotonic(self) -> float:
        return time.monotonic()


class RandomIds:
    """Ids that sort by creation time and are unique across processes:
    ``prefix_`` + 12 hex digits of milliseconds + 10 random hex digits."""

    def new(self, prefix: str) -> str:
        return f"{prefix}_{time.time_ns() // 1_000_000:012x}{os.urandom(5).hex()}"
