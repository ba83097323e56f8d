"""Summary activation and constraint rules, shared by every store (the SQLite store
enforces them inside its write transaction with the same functions).

Activation is a compare-and-set on the session's summary generation (the generation of
its newest summary, 0 when none): a summary of generation ``g + 1`` is activated only if
the session is still at ``g``, and only if it covers a longer prefix than the summary it
replaces. The newest generation is the active one; older ones stay readable.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from plait.domain.errors import ConflictError, SummaryConflictError, ValidationError
from plait.domain.session import Session
from plait.domain.summary import Constraint, Summary

__all__ = ["SummaryBook", "check_activation", "new_constraints"]


def check_activation(
    session: Session, active: Summary | None, summary: Summary, expected_generation: int
) -> None:
    """Raise unless ``summary`` may become the active summary of ``session``."""
    current = 0 if active is None else active.generation
    if summary.session_id != session.id:
        raise ValidationError(
            f"summary {summary.id!r} belongs to session {summary.session_id!r}, not {session.id!r}"
        )
    if summary.generation != expected_generation + 1:
        raise ValidationError(
            f"summary {summary.id!r} has generation {summary.generation}; activating it over "
            f"generation {expected_generation} needs generation {expected_generation + 1}"
        )
    if not 1 <= summary.covered_through_seq <= session.version:
        raise ValidationError(
            f"summary {summary.id!r} covers through seq {summary.covered_through_seq}, but "
            f"session {session.id!r} has {session.version} messages"
        )
    if current != expected_generation:
        raise SummaryConflictError(
            f"session {session.id!r} is at summary generation {current}, the compaction "
            f"expected {expected_generation}: another compaction finished first",
            session_id=session.id,
            expected=expected_generation,
            actual=current,
        )
    if active is not None and active.covered_through_seq >= summary.covered_through_seq:
        raise SummaryConflictError(
            f"the active summary of session {session.id!r} already covers through seq "
            f"{active.covered_through_seq}; a summary through {summary.covered_through_seq} "
            "would replace it with a shorter one",
            session_id=session.id,
            active_covered_through_seq=active.covered_through_seq,
        )


def duplicate_summary(summary_id: str) -> ConflictError:
    return ConflictError(f"summary {summary_id!r} already exists", summary_id=summary_id)


def new_constraints(
    existing: Iterable[Constraint], candidates: Sequence[Constraint]
) -> list[Constraint]:
    """``candidates`` not stored yet (same text from the same message), in order."""
    seen = {(candidate.source_message_id, candidate.text) for candidate in existing}
    out = []
    for candidate in candidates:
        key = (candidate.source_message_id, candidate.text)
        if key not in seen:
            seen.add(key)
            out.append(candidate)
    return out


@dataclass(slots=True)
class SummaryBook:
    """The summaries and constraints of one session, in memory."""

    summaries: list[Summary] = field(default_factory=list)
    constraints: list[Constraint] = field(default_factory=list)

    @property
    def active(self) -> Summary | None:
        return self.summaries[-1] if self.summaries else None

    def check(self, session: Session, summary: Summary, expected_generation: int) -> None:
        check_activation(session, self.active, summary, expected_generation)
