"""Calibrating a token meter by the usage the provider reports (docs/design.md#compaction).

A meter counts what plait builds; the provider reports what it charged. After each
successful call the ratio of the two (reported input tokens / the meter's count of that
request) is remembered per model, and the context's measured total is multiplied by the
largest recent ratio before it is compared with the threshold and the budget. Upwards
only: a meter that over-counts stays conservative, one that under-counts (a provider's
hidden framing, a tokenizer the estimate does not know) is corrected. Per-message counts
stay cached as they are: the correction applies to the total.
"""

from __future__ import annotations

import math
from collections import deque

__all__ = ["Calibration"]

MAX_RATIO = 10.0
"""A report further off than this is taken as a bad report, not followed all the way."""


class Calibration:
    def __init__(self, window: int = 20) -> None:
        self._ratios: deque[float] = deque(maxlen=window)

    def observe(self, measured: int, reported: int) -> None:
        """One successful call: the meter's count of the request, the provider's input
        tokens. Calls without usage (``reported`` 0) teach nothing."""
        if measured > 0 and reported > 0:
            self._ratios.append(min(reported / measured, MAX_RATIO))

    @property
    def samples(self) -> int:
        return len(self._ratios)

    @property
    def factor(self) -> float:
        return max([1.0, *self._ratios])

    def correct(self, tokens: int) -> int:
        factor = self.factor
        return tokens if factor == 1.0 else math.ceil(tokens * factor)
