"""Summaries and constraints: the lossy, derived material compaction puts in a context.

Raw history is the record and is never modified; a :class:`Summary` only changes how the
next context is built. It covers a fixed prefix of complete units (``covered_through_seq``),
names that prefix by digest, and keeps every statement tied to the raw messages it came
from, so a reader can check it and the recall tool can fetch the original. Beside the
model's prose it carries :class:`Facts` harvested from the prefix without a model (exact
where a summarizer would paraphrase).

A :class:`Constraint` is an explicit user requirement kept verbatim with its source
message, outside any free-form summary: it is always placed in the context and a summary
never weakens it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import field
from typing import Any, Literal

from plait.domain.errors import SummaryInvalidError
from plait.domain.record import record

__all__ = [
    "SUMMARY_SCHEMA_VERSION",
    "CommandFact",
    "Constraint",
    "EvidenceRef",
    "Facts",
    "FailingTest",
    "FileFact",
    "OpenQuestion",
    "SourcedNote",
    "Summary",
    "SummaryBody",
    "parse_summary_body",
    "source_digest",
    "summary_problems",
]

SUMMARY_SCHEMA_VERSION = 1

FileAction = Literal["read", "written", "edited"]


@record(kw_only=True)
class Constraint:
    """An explicit user requirement, verbatim, with the user message it came from."""

    text: str
    source_message_id: str


@record(kw_only=True)
class SourcedNote:
    """A statement of the summary (a constraint it noticed, a decision) and its sources."""

    text: str
    source_ids: tuple[str, ...]


@record(kw_only=True)
class OpenQuestion:
    """Something not settled yet. ``uncertainty`` says what is unknown, so a guess never
    reads as a fact."""

    text: str
    uncertainty: str
    source_ids: tuple[str, ...]


@record(kw_only=True)
class EvidenceRef:
    """Where the original is: a raw message, and the artifact holding its whole output."""

    message_id: str
    note: str = ""
    artifact_id: str | None = None


@record(kw_only=True)
class FileFact:
    """A workspace file a tool read, wrote or edited; the last content hash seen."""

    path: str
    action: FileAction
    content_hash: str | None
    source_message_id: str


@record(kw_only=True)
class CommandFact:
    command: str
    exit_status: int | None
    """``None`` when the output did not say (or the command never ran)."""
    tool_status: str
    source_message_id: str


@record(kw_only=True)
class FailingTest:
    name: str
    source_message_id: str


@record(kw_only=True)
class Facts:
    """Harvested without a model from the covered prefix."""

    files: tuple[FileFact, ...] = ()
    commands: tuple[CommandFact, ...] = ()
    failing_tests: tuple[FailingTest, ...] = ()
    constraints: tuple[Constraint, ...] = ()

    def source_ids(self) -> set[str]:
        ids = {f.source_message_id for f in self.files}
        ids.update(c.source_message_id for c in self.commands)
        ids.update(t.source_message_id for t in self.failing_tests)
        ids.update(c.source_message_id for c in self.constraints)
        return ids


@record(kw_only=True)
class SummaryBody:
    """What the summarizer model writes (validated)."""

    goal: str
    constraints: tuple[SourcedNote, ...] = ()
    decisions: tuple[SourcedNote, ...] = ()
    open_questions: tuple[OpenQuestion, ...] = ()
    evidence: tuple[EvidenceRef, ...] = ()

    def source_ids(self) -> set[str]:
        ids: set[str] = set()
        for notes in (self.constraints, self.decisions, self.open_questions):
            for note in notes:
                ids.update(note.source_ids)
        ids.update(e.message_id for e in self.evidence)
        return ids


@record(kw_only=True)
class Summary:
    """An activated (or candidate) summary of a session's prefix ``1..covered_through_seq``.

    ``generation`` is the session's summary generation this summary makes current; a
    store activates it only if the current generation is ``generation - 1`` (compare and
    set), so an older compaction finishing later never replaces a newer summary.
    """

    id: str
    session_id: str
    generation: int
    covered_through_seq: int
    covered_through_message_id: str
    source_digest: str
    body: SummaryBody
    facts: Facts = field(default_factory=Facts)
    model: str = ""
    template_version: str = ""
    created_at: float = 0.0
    source_tokens: int = 0
    """Tokens of the raw prefix it replaces in the context, by the meter named below."""
    summary_tokens: int = 0
    meter: str = ""
    trigger: str = "manual"
    """What asked for it: ``manual``, ``pressure`` or ``overflow``."""
    schema_version: int = SUMMARY_SCHEMA_VERSION

    @property
    def goal(self) -> str:
        return self.body.goal


def source_digest(message_ids: Iterable[str]) -> str:
    """Names a prefix: sha256 over its message ids in order. Messages are immutable once
    stored and keep their ids across forks, so equal digests mean the same prefix."""
    hasher = hashlib.sha256()
    for mid in message_ids:
        hasher.update(mid.encode())
        hasher.update(b"\n")
    return "sha256:" + hasher.hexdigest()


def summary_problems(
    summary: Summary, prefix_ids: Sequence[str], *, max_summary_tokens: int | None = None
) -> list[str]:
    """Why ``summary`` must not be activated over the prefix ``prefix_ids`` (the ids of
    messages ``1..covered_through_seq`` in order); empty when it is valid."""
    problems: list[str] = []
    if summary.schema_version != SUMMARY_SCHEMA_VERSION:
        problems.append(f"unknown summary schema_version {summary.schema_version}")
    if summary.covered_through_seq != len(prefix_ids) or summary.covered_through_seq < 1:
        problems.append(
            f"covers through seq {summary.covered_through_seq}, but the prefix has "
            f"{len(prefix_ids)} messages"
        )
    elif prefix_ids[-1] != summary.covered_through_message_id:
        problems.append(
            f"message at seq {summary.covered_through_seq} is {prefix_ids[-1]!r}, not "
            f"{summary.covered_through_message_id!r}"
        )
    if source_digest(prefix_ids) != summary.source_digest:
        problems.append("source_digest does not match the prefix")
    if not summary.body.goal.strip():
        problems.append("the goal is empty")
    known = set(prefix_ids)
    unknown = sorted((summary.body.source_ids() | summary.facts.source_ids()) - known)
    if unknown:
        problems.append("cites message ids outside the covered prefix: " + ", ".join(unknown[:10]))
    if summary.summary_tokens >= summary.source_tokens:
        problems.append(
            f"not smaller than its source ({summary.summary_tokens} tokens for "
            f"{summary.source_tokens})"
        )
    if max_summary_tokens is not None and summary.summary_tokens > max_summary_tokens:
        problems.append(f"{summary.summary_tokens} tokens, over the {max_summary_tokens} limit")
    return problems


# --- parsing the summarizer's structured output ---------------------------------------------


def _text(obj: Mapping[str, Any], key: str, where: str, problems: list[str]) -> str:
    value = obj.get(key, "")
    if not isinstance(value, str):
        problems.append(f"{where}.{key} must be a string")
        return ""
    return value.strip()


def _ids(obj: Mapping[str, Any], where: str, problems: list[str]) -> tuple[str, ...]:
    value = obj.get("source_ids")
    if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
        problems.append(f"{where}.source_ids must be a non-empty list of message ids")
        return ()
    return tuple(value)


def _items(value: Any, key: str, problems: list[str]) -> list[tuple[str, Mapping[str, Any]]]:
    raw = value.get(key, [])
    if not isinstance(raw, list):
        problems.append(f"{key} must be a list")
        return []
    out: list[tuple[str, Mapping[str, Any]]] = []
    for number, item in enumerate(raw):
        where = f"{key}[{number}]"
        if not isinstance(item, dict):
            problems.append(f"{where} must be an object")
        else:
            out.append((where, item))
    return out


def _notes(value: Any, key: str, problems: list[str]) -> tuple[SourcedNote, ...]:
    notes = []
    for where, item in _items(value, key, problems):
        text = _text(item, "text", where, problems)
        if not text:
            problems.append(f"{where}.text is empty")
        notes.append(SourcedNote(text=text, source_ids=_ids(item, where, problems)))
    return tuple(notes)


def parse_summary_body(value: Any) -> SummaryBody:
    """The summarizer's JSON as a :class:`SummaryBody`; raises
    :class:`~plait.domain.errors.SummaryInvalidError` listing every problem."""
    problems: list[str] = []
    if not isinstance(value, dict):
        raise SummaryInvalidError(
            "the summary must be a JSON object", problems=["not a JSON object"]
        )
    unknown = sorted(set(value) - _KEYS)
    if unknown:
        problems.append("unknown keys: " + ", ".join(unknown))
    goal = _text(value, "goal", "summary", problems)
    if not goal and isinstance(value.get("goal", ""), str):
        problems.append("summary.goal is empty: say what the user is trying to achieve")
    questions = []
    for where, item in _items(value, "open_questions", problems):
        uncertainty = _text(item, "uncertainty", where, problems)
        if not uncertainty:
            problems.append(f"{where}.uncertainty must say what is not known")
        questions.append(
            OpenQuestion(
                text=_text(item, "text", where, problems),
                uncertainty=uncertainty,
                source_ids=_ids(item, where, problems),
            )
        )
    evidence = []
    for where, item in _items(value, "evidence", problems):
        mid = item.get("message_id")
        art = item.get("artifact_id")
        if not isinstance(mid, str) or not mid:
            problems.append(f"{where}.message_id must be a message id")
            continue
        if art is not None and not isinstance(art, str):
            problems.append(f"{where}.artifact_id must be a string or null")
            art = None
        evidence.append(
            EvidenceRef(message_id=mid, note=_text(item, "note", where, problems), artifact_id=art)
        )
    body = SummaryBody(
        goal=goal,
        constraints=_notes(value, "constraints", problems),
        decisions=_notes(value, "decisions", problems),
        open_questions=tuple(questions),
        evidence=tuple(evidence),
    )
    if problems:
        raise SummaryInvalidError(
            "the summary does not match its schema: " + "; ".join(problems[:8]),
            problems=problems,
        )
    return body


_KEYS = frozenset({"goal", "constraints", "decisions", "open_questions", "evidence"})
