"""The Summarizer: asks the summarizer role for a structured summary of raw messages.

It only ever reads raw history. A prefix larger than the summarizer model's own window is
cut into chunks of complete units; each chunk is summarized from its raw messages and the
chunk summaries are merged without a model (lists concatenated, the latest goal kept),
so no summary is ever made from another summary's prose. A single message too large for
a chunk is shown truncated, with a pointer to the whole message for recall.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Iterable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import TypeVar

from plait.application.compaction._ledger import CountCache
from plait.application.compaction._profiles import ModelProfile
from plait.application.compaction._render import SUMMARIZER_INSTRUCTIONS, render_message
from plait.application.compaction.guard import CallGuard
from plait.application.ports import ModelClient, ModelRequest
from plait.domain.compaction import CompactionSettings
from plait.domain.context import Context
from plait.domain.errors import CompactionError, ModelError, PlaitError, SummaryInvalidError
from plait.domain.messages import UserMessage
from plait.domain.session import StoredMessage
from plait.domain.summary import SummaryBody, parse_summary_body
from plait.domain.units import units

__all__ = ["SummarizeResult", "Summarizer", "merge_bodies"]

log = logging.getLogger("plait.compaction")

T = TypeVar("T")

_OVERHEAD = 64
"""Tokens for the wrapper of one request beyond instructions and transcript."""


@dataclass(slots=True)
class SummarizeResult:
    body: SummaryBody
    model: str
    calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    chunks: int = 0
    problems: list[str] = field(default_factory=list)


def _unique(items: Iterable[T], key: Callable[[T], str]) -> tuple[T, ...]:
    seen: set[str] = set()
    out = []
    for item in items:
        seen_key = key(item)
        if seen_key not in seen:
            seen.add(seen_key)
            out.append(item)
    return tuple(out)


def merge_bodies(bodies: Sequence[SummaryBody]) -> SummaryBody:
    """Concatenate chunk summaries in order (duplicates by text dropped); the latest
    non-empty goal wins."""
    return SummaryBody(
        goal=next((b.goal for b in reversed(bodies) if b.goal.strip()), ""),
        constraints=_unique((c for b in bodies for c in b.constraints), lambda note: note.text),
        decisions=_unique((d for b in bodies for d in b.decisions), lambda note: note.text),
        open_questions=_unique(
            (q for b in bodies for q in b.open_questions), lambda question: question.text
        ),
        evidence=_unique(
            (e for b in bodies for e in b.evidence), lambda evidence: evidence.message_id
        ),
    )


class Summarizer:
    def __init__(
        self,
        *,
        model: ModelClient,
        profile: ModelProfile,
        settings: CompactionSettings,
        cache: CountCache,
    ) -> None:
        self.model = model
        self.profile = profile
        self.settings = settings
        self.cache = cache

    @property
    def max_output(self) -> int:
        """``summary_max_tokens``, within what the summarizer model can produce."""
        cap = self.profile.max_output_tokens
        limit = self.settings.summary_max_tokens
        return limit if cap is None else min(limit, cap)

    def _chunk_budget(self) -> int:
        meter = self.profile.meter
        fixed = self.cache.text(meter, SUMMARIZER_INSTRUCTIONS) + _OVERHEAD
        margin = max(self.profile.context_window // 50, 16)
        budget = self.profile.context_window - self.max_output - fixed - margin
        if budget < 256:
            raise CompactionError(
                f"the summarizer model {self.model.name!r} has a {self.profile.context_window}"
                f"-token window: too small to summarize with {self.max_output} output tokens; "
                "choose a larger summarizer model or lower summary_max_tokens",
                model=self.model.name,
            )
        return budget

    def _render(self, sm: StoredMessage, budget: int) -> str:
        meter = self.profile.meter
        text = render_message(sm)
        limit = len(text)
        while meter.count_text(text) > budget and limit > 64:
            limit //= 2
            text = render_message(sm, max_chars=limit)
        return text

    def chunks(self, messages: Sequence[StoredMessage]) -> list[list[str]]:
        """The transcript, cut into chunks of whole units that fit the summarizer."""
        budget = self._chunk_budget()
        meter = self.profile.meter
        chunks: list[list[str]] = []
        current: list[str] = []
        used = 0
        plain = [sm.message for sm in messages]
        for unit in units(plain):
            texts = [self._render(messages[i], budget) for i in range(unit.start, unit.end + 1)]
            cost = sum(meter.count_text(t) + 1 for t in texts)
            if current and used + cost > budget:
                chunks.append(current)
                current, used = [], 0
            current.extend(texts)
            used += cost
        if current:
            chunks.append(current)
        return chunks

    async def summarize(
        self, messages: Sequence[StoredMessage], guard: CallGuard | None = None
    ) -> SummarizeResult:
        """Summarize ``messages`` (complete units, in order). Raises
        :class:`~plait.domain.errors.CompactionError` when no valid summary came back
        within the allowed retries. ``guard``: the run's checks before each call (its stop
        propagates as raised)."""
        result = SummarizeResult(body=SummaryBody(goal=""), model=self.model.name)
        known = {sm.message.id for sm in messages}
        bodies = []
        for number, chunk in enumerate(self.chunks(messages), 1):
            bodies.append(await self._one(chunk, number, known, result, guard))
            result.chunks = number
        result.body = merge_bodies(bodies)
        return result

    async def _one(
        self,
        chunk: list[str],
        number: int,
        known: set[str],
        result: SummarizeResult,
        guard: CallGuard | None,
    ) -> SummaryBody:
        transcript = UserMessage(
            id=f"ctx_transcript_{number}", text="\n".join(chunk), created_at=0.0
        )
        context: Context[dict[str, object]] = Context(
            instructions=SUMMARIZER_INSTRUCTIONS, tools=(), items=(transcript,), output_type=dict
        )
        request = ModelRequest(
            role="summarizer", context=context, max_output_tokens=self.max_output
        )
        failures: list[str] = []
        for _attempt in range(self.settings.summary_retries + 1):
            if guard is not None:
                guard.before_call()  # cancelled or out of budget: no call is made
            result.calls += 1
            try:
                with nullcontext() if guard is None else guard.interruptible():
                    async with asyncio.timeout(self.settings.summary_timeout_seconds):
                        response = await self.model.complete(request)
            except TimeoutError:
                failures.append(f"timed out after {self.settings.summary_timeout_seconds:g} s")
                continue
            except ModelError as exc:
                failures.append(f"model error {exc.model_code}: {exc.message}")
                continue
            except PlaitError as exc:
                failures.append(f"{exc.code}: {exc.message}")
                continue
            if guard is not None:
                guard.after_call(response.usage)
            result.input_tokens += response.usage.input_tokens
            result.output_tokens += response.usage.output_tokens
            if response.model:
                result.model = response.model
            value = response.structured
            if value is None:
                try:
                    value = json.loads(response.text)
                except ValueError:
                    failures.append("the answer is not JSON")
                    continue
            try:
                body = parse_summary_body(value)
            except SummaryInvalidError as exc:
                failures.append(exc.message)
                continue
            outside = sorted(body.source_ids() - known)
            if outside:
                failures.append("cites ids not in the transcript: " + ", ".join(outside[:8]))
                continue
            return body
        result.problems.extend(failures)
        log.warning("summarizer failed on chunk %d: %s", number, "; ".join(failures))
        raise CompactionError(
            f"the summarizer gave no valid summary in {len(failures)} attempt(s): "
            + "; ".join(failures),
            attempts=len(failures),
            problems=failures,
            calls=result.calls,
        )
