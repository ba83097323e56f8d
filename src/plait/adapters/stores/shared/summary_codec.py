"""Summaries and constraints as JSON (one codec shared by every store)."""

from __future__ import annotations

from typing import Any

from plait.adapters.stores.shared.codec import decode
from plait.domain.summary import (
    SUMMARY_SCHEMA_VERSION,
    CommandFact,
    Constraint,
    EvidenceRef,
    Facts,
    FailingTest,
    FileFact,
    OpenQuestion,
    SourcedNote,
    Summary,
    SummaryBody,
)

__all__ = ["constraint_from_dict", "constraint_to_dict", "summary_from_dict", "summary_to_dict"]


def _note(n: SourcedNote) -> dict[str, Any]:
    return {"text": n.text, "source_ids": list(n.source_ids)}


def _constraint(c: Constraint) -> dict[str, Any]:
    return {"text": c.text, "source_message_id": c.source_message_id}


def summary_to_dict(s: Summary) -> dict[str, Any]:
    b, f = s.body, s.facts
    return {
        "schema_version": s.schema_version,
        "id": s.id,
        "session_id": s.session_id,
        "generation": s.generation,
        "covered_through_seq": s.covered_through_seq,
        "covered_through_message_id": s.covered_through_message_id,
        "source_digest": s.source_digest,
        "goal": b.goal,
        "constraints": [_note(n) for n in b.constraints],
        "decisions": [_note(n) for n in b.decisions],
        "open_questions": [
            {"text": q.text, "uncertainty": q.uncertainty, "source_ids": list(q.source_ids)}
            for q in b.open_questions
        ],
        "evidence": [
            {"message_id": e.message_id, "note": e.note, "artifact_id": e.artifact_id}
            for e in b.evidence
        ],
        "facts": {
            "files": [
                {
                    "path": x.path,
                    "action": x.action,
                    "content_hash": x.content_hash,
                    "source_message_id": x.source_message_id,
                }
                for x in f.files
            ],
            "commands": [
                {
                    "command": x.command,
                    "exit_status": x.exit_status,
                    "tool_status": x.tool_status,
                    "source_message_id": x.source_message_id,
                }
                for x in f.commands
            ],
            "failing_tests": [
                {"name": x.name, "source_message_id": x.source_message_id} for x in f.failing_tests
            ],
            "constraints": [_constraint(c) for c in f.constraints],
        },
        "model": s.model,
        "template_version": s.template_version,
        "created_at": s.created_at,
        "source_tokens": s.source_tokens,
        "summary_tokens": s.summary_tokens,
        "meter": s.meter,
        "trigger": s.trigger,
    }


def _notes(items: list[dict[str, Any]]) -> tuple[SourcedNote, ...]:
    return tuple(SourcedNote(text=n["text"], source_ids=tuple(n["source_ids"])) for n in items)


def _summary(d: dict[str, Any]) -> Summary:
    f = d["facts"]
    body = SummaryBody(
        goal=d["goal"],
        constraints=_notes(d["constraints"]),
        decisions=_notes(d["decisions"]),
        open_questions=tuple(
            OpenQuestion(
                text=q["text"], uncertainty=q["uncertainty"], source_ids=tuple(q["source_ids"])
            )
            for q in d["open_questions"]
        ),
        evidence=tuple(
            EvidenceRef(message_id=e["message_id"], note=e["note"], artifact_id=e["artifact_id"])
            for e in d["evidence"]
        ),
    )
    facts = Facts(
        files=tuple(FileFact(**x) for x in f["files"]),
        commands=tuple(CommandFact(**x) for x in f["commands"]),
        failing_tests=tuple(FailingTest(**x) for x in f["failing_tests"]),
        constraints=tuple(Constraint(**x) for x in f["constraints"]),
    )
    return Summary(
        id=d["id"],
        session_id=d["session_id"],
        generation=int(d["generation"]),
        covered_through_seq=int(d["covered_through_seq"]),
        covered_through_message_id=d["covered_through_message_id"],
        source_digest=d["source_digest"],
        body=body,
        facts=facts,
        model=d["model"],
        template_version=d["template_version"],
        created_at=float(d["created_at"]),
        source_tokens=int(d["source_tokens"]),
        summary_tokens=int(d["summary_tokens"]),
        meter=d["meter"],
        trigger=d["trigger"],
        schema_version=SUMMARY_SCHEMA_VERSION,
    )


def summary_from_dict(d: Any) -> Summary:
    return decode(_summary, d, "summary")


def constraint_to_dict(c: Constraint) -> dict[str, Any]:
    return {"schema_version": SUMMARY_SCHEMA_VERSION, **_constraint(c)}


def constraint_from_dict(d: Any) -> Constraint:
    return decode(
        lambda x: Constraint(text=x["text"], source_message_id=x["source_message_id"]),
        d,
        "constraint",
    )
