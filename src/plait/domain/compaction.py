"""Compaction rules, pure: budgets, cut points and which prefix to summarize.

Compaction never modifies history; it picks a prefix of *complete units* whose summary
replaces them in the next context. A complete unit is a user message, a plain assistant
message, or an assistant message with tool calls together with all of its results: a
summary boundary never falls between a call and its result, and calls still waiting for
a result always stay in the raw tail.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from plait.domain.errors import ValidationError
from plait.domain.messages import Message
from plait.domain.record import record
from plait.domain.units import cut_points as unit_cut_points

__all__ = [
    "CompactionPlan",
    "CompactionSettings",
    "ContextBudget",
    "Trigger",
    "cut_points",
    "plan_compaction",
]

Trigger = Literal["manual", "pressure", "overflow"]


def cut_points(messages: Sequence[Message]) -> list[int]:
    """Every ``k`` (1..n) such that ``messages[:k]`` ends with a complete unit (the rules
    of :mod:`plait.domain.units`, as counts rather than indices). Ascending."""
    return [end + 1 for end in unit_cut_points(messages)]


@record(kw_only=True)
class ContextBudget:
    """``input budget = context window − reserved output − safety margin``."""

    window: int
    reserved_output: int
    safety_margin: int

    def __post_init__(self) -> None:
        if self.window < 1 or self.reserved_output < 0 or self.safety_margin < 0:
            raise ValidationError(
                f"context budget needs a positive window and non-negative reserves, got "
                f"window={self.window}, reserved_output={self.reserved_output}, "
                f"safety_margin={self.safety_margin}"
            )
        if self.input_budget < 1:
            raise ValidationError(
                f"the reserved output ({self.reserved_output}) and safety margin "
                f"({self.safety_margin}) leave nothing of the {self.window}-token window "
                "for input; lower them or choose a model with a larger window"
            )

    @property
    def input_budget(self) -> int:
        return self.window - self.reserved_output - self.safety_margin


@record(kw_only=True)
class CompactionSettings:
    """Defaults of docs/design.md#compaction."""

    auto: bool = True
    """``False`` registers no automatic trigger (manual ``plait compact`` still works)."""
    threshold: float = 0.8
    """Compact after a step when the measured context passes this share of the window."""
    retained_tokens: int | None = None
    """Recent history kept raw; ``None`` means ``floor(0.16 × window)``."""
    summary_max_tokens: int = 8_192
    summary_retries: int = 1
    summary_timeout_seconds: float = 120.0
    max_overflow_retries: int = 1
    """``0`` disables overflow recovery only, not the pressure check."""
    max_compactions_per_run: int = 4
    reserved_output: int | None = None
    """Output reserved in the budget; ``None``: the model's max output, capped at 1/8 of
    the window."""
    safety_margin_ratio: float = 0.02
    summarizer_model: str = ""
    """Model spec (or plait.toml name) of the summarizer role; ``""``: the session's model
    (the RFC's default)."""

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> CompactionSettings:
        """Settings from a ``[compaction]`` table; unknown keys and wrong types are errors
        naming the key and what it takes."""
        values: dict[str, Any] = {}
        for key, value in data.items():
            kind = _KINDS.get(key)
            if kind is None:
                known = ", ".join(sorted(_KINDS))
                raise ValidationError(f"unknown key {key!r}; known: {known}", key=key)
            ok = isinstance(value, kind) and not (kind is not bool and isinstance(value, bool))
            if not ok and kind is float and isinstance(value, int) and not isinstance(value, bool):
                value, ok = float(value), True
            if not ok:
                raise ValidationError(f"{key} must be {_KIND_NAMES[kind]}, got {value!r}", key=key)
            values[key] = value
        return cls(**values)

    def __post_init__(self) -> None:
        if not 0.0 < self.threshold <= 1.0:
            raise ValidationError(f"compaction threshold must be in (0, 1], got {self.threshold}")
        for name in ("summary_retries", "max_overflow_retries", "max_compactions_per_run"):
            if getattr(self, name) < 0:
                raise ValidationError(f"compaction {name} must be at least 0")
        if self.summary_max_tokens < 1:
            raise ValidationError("compaction summary_max_tokens must be at least 1")
        if self.retained_tokens is not None and self.retained_tokens < 0:
            raise ValidationError("compaction retained_tokens must be at least 0")
        if self.summary_timeout_seconds <= 0:
            raise ValidationError("compaction summary_timeout_seconds must be positive")
        if not 0.0 <= self.safety_margin_ratio < 0.5:
            raise ValidationError("compaction safety_margin_ratio must be in [0, 0.5)")

    def threshold_for(self, window: int) -> int:
        """The smallest token count that triggers the post-step compaction: ``tokens >=
        threshold × window`` (the RFC's rule; 0.8 of a 10,001-token window is 8,000.8, so
        8,001). Rounded to 6 places first, so a product meant to be whole stays whole."""
        return math.ceil(round(self.threshold * window, 6))

    def retained_for(self, window: int) -> int:
        if self.retained_tokens is not None:
            return self.retained_tokens
        return math.floor(0.16 * window)

    def budget_for(self, window: int, max_output_tokens: int | None) -> ContextBudget:
        reserved = self.reserved_output
        if reserved is None:
            cap = window // 8
            reserved = cap if max_output_tokens is None else min(max_output_tokens, cap)
        margin = math.ceil(window * self.safety_margin_ratio)
        return ContextBudget(window=window, reserved_output=reserved, safety_margin=margin)


_KINDS: dict[str, type] = {
    "auto": bool,
    "threshold": float,
    "retained_tokens": int,
    "summary_max_tokens": int,
    "summary_retries": int,
    "summary_timeout_seconds": float,
    "max_overflow_retries": int,
    "max_compactions_per_run": int,
    "reserved_output": int,
    "safety_margin_ratio": float,
    "summarizer_model": str,
}
_KIND_NAMES = {bool: "true or false", float: "a number", int: "an integer", str: "a string"}


@record(kw_only=True)
class CompactionPlan:
    """Summarize ``messages[:covered_through]`` (seqs 1..covered_through); keep the rest."""

    covered_through: int
    source_tokens: int
    kept_tokens: int


def plan_compaction(
    *,
    prefix_tokens: Sequence[int],
    cuts: Sequence[int],
    already_covered: int,
    retained_tokens: int,
    trigger: Trigger,
) -> CompactionPlan | None:
    """Choose the prefix to summarize, or ``None`` when no complete unit beyond the
    active summary can be folded in.

    ``prefix_tokens[k]`` is the token count of ``messages[:k]`` (length ``n + 1``);
    ``cuts`` come from :func:`cut_points`. The newest unit (or the unsettled tail) always
    stays raw. ``pressure``/``manual`` keep the newest units that fit in
    ``retained_tokens``; ``overflow`` keeps only the newest unit.
    """
    count = len(prefix_tokens) - 1
    if not cuts or count < 1:
        return None
    # The newest unit: the unsettled tail if there is one, else the last complete unit.
    newest_start = cuts[-1] if cuts[-1] < count else (cuts[-2] if len(cuts) > 1 else 0)
    candidates = [cut for cut in cuts if already_covered < cut <= newest_start]
    if not candidates:
        return None
    total = prefix_tokens[count]
    if trigger == "overflow":
        cut = candidates[-1]
    else:
        fitting = [c for c in candidates if total - prefix_tokens[c] <= retained_tokens]
        cut = fitting[0] if fitting else candidates[-1]
    return CompactionPlan(
        covered_through=cut,
        source_tokens=prefix_tokens[cut],
        kept_tokens=total - prefix_tokens[cut],
    )
