"""Assembling the model-visible context: instructions, tools, constraints, the active
summary, the raw tail and any evidence already recalled into it, with a token breakdown.

Constraint records and the summary reach the model as one preamble message in front of
the raw tail, labelled by source and trust (see :func:`._render.render_preamble`); the
summary never enters the instructions, so nothing a tool or file said is promoted to a
system instruction. When the summary covers the latest user request, that request is
pinned verbatim right after the preamble.

A view records what it was built from (:class:`ViewBasis`). A caller that kept a view may
pass it back as ``reuse``: when the next build would be made from an equal basis (same
session, profile, history, instructions, tools, corrections, and the summary and
constraints the store holds now), that view is returned as it is instead of a new one.

Token counts outlive the process when the store keeps them (a
:class:`~plait.application.ports.TokenCountStore`) and the meter names everything that
decides its counts (a ``fingerprint``; a tokenizer's, whose counting costs more than a
read; estimates by characters declare none): a ledger far behind the history first reads the
stored counts, and the counts it made itself are stored in batches. A session resumed in
a fresh process is then not measured again. ``measure=False`` builds without counting
anything (the token figures are 0): for a model without a window, whose context is never
checked against one.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import field
from typing import Any, NamedTuple, Protocol, cast

from plait.application.compaction._ledger import CountCache, Ledger
from plait.application.compaction._profiles import ModelProfile
from plait.application.compaction._render import PREAMBLE_ID_PREFIX, render_preamble
from plait.application.ports import (
    ContextRead,
    SessionStore,
    SummaryStore,
    TokenCountStore,
    TokenMeter,
)
from plait.domain.compaction import CompactionSettings, ContextBudget
from plait.domain.context import CompactedRange, Context, Correction, Prefix
from plait.domain.messages import AssistantMessage, Message, UserMessage
from plait.domain.record import record
from plait.domain.summary import Constraint, Summary
from plait.domain.tools import ToolSpec

__all__ = ["ContextAssembler", "ContextView", "TokenBreakdown", "ViewBasis", "summary_applies"]

log = logging.getLogger("plait.compaction")

PRIME_AFTER = 64
"""A ledger missing this many counts of the history reads the stored ones first."""
SAVE_EVERY = 64
"""Counts made in this process are stored once this many are waiting."""


def meter_fingerprint(meter: TokenMeter) -> str | None:
    """What a meter's stored counts are kept under; None: its counts are not stored."""
    fingerprint = getattr(meter, "fingerprint", None)
    return fingerprint if isinstance(fingerprint, str) and fingerprint else None


@record(kw_only=True)
class TokenBreakdown:
    instructions: int = 0
    tools: int = 0
    preamble: int = 0
    """Constraint records and the active summary."""
    pinned: int = 0
    """The latest user request, when the summary covers it."""
    tail: int = 0
    corrections: int = 0

    @property
    def total(self) -> int:
        return (
            self.instructions
            + self.tools
            + self.preamble
            + self.pinned
            + self.tail
            + self.corrections
        )


class ViewBasis(NamedTuple):
    """Everything a view is built from. The history is append-only and its message ids
    are unique in a session, so its length and last id stand for it. (A tuple: made and
    compared at every build.)"""

    session_id: str
    profile: ModelProfile
    history_length: int
    last_message_id: str | None
    instructions: str
    tools: tuple[ToolSpec, ...]
    output_type: type[Any]
    corrections: tuple[Correction, ...]
    summary: Summary | None
    """The active summary as read (or given), before checking that it applies."""
    constraints: tuple[Constraint, ...]
    calibration: float
    """The profile's calibration factor (it changes with every run of the model)."""
    measured: bool = True
    """False: built without counting (``measure=False``)."""


@record(kw_only=True)
class ContextView:
    """What the next model call would see, and what it costs."""

    context: Context[Any]
    model: str
    meter: str
    exact: bool
    budget: ContextBudget
    threshold_tokens: int
    tokens: TokenBreakdown
    summary: Summary | None
    constraints: tuple[Constraint, ...]
    history_messages: int
    tail_from_seq: int
    """First seq of the raw tail (1 when nothing is summarized)."""
    pinned_message_id: str | None
    preamble: str
    full_history_tokens: int
    """What the raw history alone would cost, for comparison."""
    calibration: float = 1.0
    """The meter's correction factor from reported usage (1.0 until a provider reported
    more input tokens than the meter counted)."""
    basis: ViewBasis | None = field(default=None, compare=False, repr=False)
    """What the view was built from (see :meth:`ContextAssembler.build`'s ``reuse``)."""

    @property
    def corrected_total(self) -> int:
        """``tokens.total`` corrected by :attr:`calibration`: what the threshold and the
        budget are checked against."""
        tokens = self.tokens.total
        return tokens if self.calibration == 1.0 else math.ceil(tokens * self.calibration)

    @property
    def over_threshold(self) -> bool:
        return self.corrected_total >= self.threshold_tokens

    @property
    def over_budget(self) -> bool:
        return self.corrected_total > self.budget.input_budget


def summary_applies(summary: Summary, history: Sequence[Message]) -> bool:
    """Cheap check that ``summary`` covers a prefix of ``history`` (history is immutable,
    so the id at the covered seq identifies the prefix within one session)."""
    covered = summary.covered_through_seq
    return (
        1 <= covered <= len(history)
        and history[covered - 1].id == summary.covered_through_message_id
    )


class CompactionStore(SessionStore, SummaryStore, Protocol):
    """What compaction needs of a store."""


class ContextAssembler:
    """Builds contexts for one store; keeps a token ledger per (session, meter)."""

    def __init__(
        self, *, store: CompactionStore, settings: CompactionSettings, cache: CountCache
    ) -> None:
        self.store = store
        self.settings = settings
        self.cache = cache
        self._ledgers: dict[tuple[str, str], Ledger] = {}
        self._preambles: dict[tuple[str, str], tuple[object, str, int]] = {}
        self._primed: set[tuple[str, str]] = set()

    def ledger(
        self, session_id: str, meter: TokenMeter | None, history: Sequence[Message]
    ) -> Ledger:
        """The (session, meter) ledger, synced with ``history``; ``meter=None``: one that
        counts nothing."""
        key = (session_id, "" if meter is None else meter.name)
        ledger = self._ledgers.get(key)
        if ledger is None or ledger.meter is not meter:
            ledger = self._ledgers[key] = Ledger(meter, self.cache)
        ledger.sync(history)
        return ledger

    async def prime(self, session_id: str, meter: TokenMeter, history: Sequence[Message]) -> None:
        """Read the stored counts of ``history`` by ``meter`` into the cache when many are
        missing there (once per session and meter in this process); a failed read only
        means counting them."""
        fingerprint = meter_fingerprint(meter)
        key = (session_id, meter.name)
        if not self.store.capabilities.token_counts or fingerprint is None or key in self._primed:
            return
        counts = self.cache.of(meter)
        missing = sum(1 for m in history if m.id not in counts)
        if missing < PRIME_AFTER:
            return
        self._primed.add(key)
        try:
            stored = await cast("TokenCountStore", self.store).read_token_counts(
                session_id, fingerprint
            )
        except Exception:
            log.warning("reading the stored token counts of %s failed", session_id, exc_info=True)
            return
        for message_id, tokens in stored.items():
            counts.setdefault(message_id, tokens)

    async def keep_counts(self, session_id: str, ledger: Ledger, *, force: bool = False) -> None:
        """Store the counts ``ledger`` made itself once :data:`SAVE_EVERY` are waiting
        (``force``: any); dropped when the store keeps none. A failed write is logged (the
        counts are only made again)."""
        fresh = ledger.fresh
        if not fresh or (len(fresh) < SAVE_EVERY and not force):
            return
        ledger.fresh = {}
        fingerprint = None if ledger.meter is None else meter_fingerprint(ledger.meter)
        if not self.store.capabilities.token_counts or fingerprint is None:
            return
        try:
            await cast("TokenCountStore", self.store).save_token_counts(
                session_id, fingerprint, fresh
            )
        except Exception:
            log.warning("storing the token counts of %s failed", session_id, exc_info=True)

    def _preamble(
        self,
        session_id: str,
        meter: TokenMeter,
        constraints: tuple[Constraint, ...],
        summary: Summary | None,
    ) -> tuple[str, int]:
        key = (session_id, meter.name)
        stamp = (constraints, None if summary is None else summary.id)
        hit = self._preambles.get(key)
        if hit is not None and hit[0] == stamp:
            return hit[1], hit[2]
        text = render_preamble(constraints, summary)
        tokens = meter.count_text(text) if text else 0
        self._preambles[key] = (stamp, text, tokens)
        return text, tokens

    async def _read(
        self, session_id: str, summary: Summary | None, constraints: tuple[Constraint, ...] | None
    ) -> tuple[Summary | None, tuple[Constraint, ...]]:
        """The active summary and the constraints, unless given; in one read when the
        store offers it (PostgreSQL: one round trip)."""
        if summary is None and constraints is None and self.store.capabilities.context_read:
            found, listed = await cast("ContextRead", self.store).summary_and_constraints(
                session_id
            )
            return found, tuple(listed)
        if summary is None:
            summary = await self.store.get_summary(session_id)
        if constraints is None:
            constraints = tuple(await self.store.list_constraints(session_id))
        return summary, constraints

    async def build(
        self,
        session_id: str,
        history: list[Message],
        *,
        profile: ModelProfile,
        instructions: str,
        tools: tuple[ToolSpec, ...],
        output_type: type[Any] = AssistantMessage,
        corrections: tuple[Correction, ...] = (),
        summary: Summary | None = None,
        constraints: tuple[Constraint, ...] | None = None,
        reuse: ContextView | None = None,
        measure: bool = True,
        read: ViewBasis | None = None,
    ) -> ContextView:
        """The context for ``history`` (the session's whole history, in order). The active
        summary and constraints are read from the store unless given. ``reuse``: a view
        built before; returned as it is if it was built from the same basis as this one.
        ``measure=False``: nothing is counted (every token figure is 0). ``read``: the
        basis of a view of the same step boundary, whose summary and constraints (read
        when it was built) are used instead of reading them again."""
        if read is not None:
            summary, constraints = read.summary, read.constraints
        else:
            summary, constraints = await self._read(session_id, summary, constraints)
        basis = ViewBasis(
            session_id=session_id,
            profile=profile,
            history_length=len(history),
            last_message_id=history[-1].id if history else None,
            instructions=instructions,
            tools=tools,
            output_type=output_type,
            corrections=corrections,
            summary=summary,
            constraints=constraints,
            calibration=profile.calibration.factor,
            measured=measure,
        )
        if reuse is not None and reuse.basis == basis:
            return reuse
        if measure:
            await self.prime(session_id, profile.meter, history)
        view = self._assemble(basis, history)
        if measure:
            await self.keep_counts(session_id, self._ledgers[(session_id, profile.meter.name)])
        return view

    def _assemble(self, basis: ViewBasis, history: list[Message]) -> ContextView:
        session_id, profile, meter = basis.session_id, basis.profile, basis.profile.meter
        summary = basis.summary
        summary = summary if summary and summary_applies(summary, history) else None
        ledger = self.ledger(session_id, meter if basis.measured else None, history)
        start = 0 if summary is None else summary.covered_through_seq
        preamble, preamble_tokens = self._preamble(session_id, meter, basis.constraints, summary)
        last_user = ledger.last_user
        pinned = history[last_user] if 0 <= last_user < start else None
        assert pinned is None or isinstance(pinned, UserMessage)
        items, compacted = _items(session_id, history, preamble, pinned, summary, ledger)
        context: Context[Any] = Context(
            instructions=basis.instructions,
            tools=basis.tools,
            items=items,
            output_type=basis.output_type,
            corrections=basis.corrections,
            compacted=compacted,
        )
        tokens = (
            TokenBreakdown(
                instructions=self.cache.text(meter, basis.instructions),
                tools=self.cache.tools(meter, basis.tools),
                preamble=preamble_tokens,
                pinned=0 if pinned is None else self.cache.message(meter, pinned),
                tail=ledger.tokens(start),
                corrections=_corrections(meter, basis.corrections),
            )
            if basis.measured
            else TokenBreakdown()
        )
        budget = self.settings.budget_for(profile.context_window, profile.max_output_tokens)
        return ContextView(
            context=context,
            model=profile.model,
            meter=meter.name,
            exact=meter.exact,
            budget=budget,
            threshold_tokens=self.settings.threshold_for(profile.context_window),
            tokens=tokens,
            summary=summary,
            constraints=basis.constraints,
            history_messages=len(history),
            tail_from_seq=start + 1,
            pinned_message_id=None if pinned is None else pinned.id,
            preamble=preamble,
            full_history_tokens=ledger.tokens(0),
            calibration=basis.calibration,
            basis=basis,
        )


def _corrections(meter: TokenMeter, corrections: tuple[Correction, ...]) -> int:
    return sum(meter.count_text(c.rejected_text + " ".join(c.problems)) for c in corrections)


def _items(
    session_id: str,
    history: list[Message],
    preamble: str,
    pinned: UserMessage | None,
    summary: Summary | None,
    ledger: Ledger,
) -> tuple[Sequence[Message], CompactedRange | None]:
    """The model-visible items: the raw history as is when there is nothing to add, else
    the preamble, the pinned request and the raw tail after the summary."""
    if not preamble:
        return Prefix(history), None
    gen = 0 if summary is None else summary.generation
    head: list[Message] = [
        UserMessage(
            id=f"{PREAMBLE_ID_PREFIX}preamble_{session_id}_{gen}",
            text=preamble,
            created_at=0.0 if summary is None else summary.created_at,
        )
    ]
    if pinned is not None:
        head.append(pinned)
    if summary is None:
        return head + history, None
    start = summary.covered_through_seq
    compacted = CompactedRange(
        summary_id=summary.id,
        generation=summary.generation,
        covered_through_seq=start,
        omitted_messages=start,
        omitted_assistant_messages=ledger.assistants[start],
    )
    return head + history[start:], compacted
