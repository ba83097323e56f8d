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


def _note(note: SourcedNote) -> dict[str, Any]:
    return {"text": note.text, "source_ids": list(note.source_ids)}


def _constraint(constraint: Constraint) -> dict[str, Any]:
    return {"text": constraint.text, "source_message_id": constraint.source_message_id}


def summary_to_dict(summary: Summary) -> dict[str, Any]:
    body, facts = summary.body, summary.facts
    return {
        "schema_version": summary.schema_version,
        "id": summary.id,
        "session_id": summary.session_id,
        "generation": summary.generation,
        "covered_through_seq": summary.covered_through_seq,
        "covered_through_message_id": summary.covered_through_message_id,
        "source_digest": summary.source_digest,
        "goal": body.goal,
        "constraints": [_note(n) for n in body.constraints],
        "decisions": [_note(n) for n in body.decisions],
        "open_questions": [
            {"text": q.text, "uncertainty": q.uncertainty, "source_ids": list(q.source_ids)}
            for q in body.open_questions
        ],
        "evidence": [
            {"message_id": e.message_id, "note": e.note, "artifact_id": e.artifact_id}
            for e in body.evidence
        ],
        "facts": {
            "files": [
                {
                    "path": x.path,
                    "action": x.action,
                    "content_hash": x.content_hash,
                    "source_message_id": x.source_message_id,
                }
                for x in facts.files
            ],
            "commands": [
                {
                    "command": x.command,
                    "exit_status": x.exit_status,
                    "tool_status": x.tool_status,
                    "source_message_id": x.source_message_id,
                }
                for x in facts.commands
            ],
            "failing_tests": [
                {"name": x.name, "source_message_id": x.source_message_id}
                for x in facts.failing_tests
            ],
            "constraints": [_constraint(c) for c in facts.constraints],
        },
        "model": summary.model,
        "template_version": summary.template_version,
        "created_at": summary.created_at,
        "source_tokens": summary.source_tokens,
        "summary_tokens": summary.summary_tokens,
        "meter": summary.meter,
        "trigger": summary.trigger,
    }


def _notes(items: list[dict[str, Any]]) -> tuple[SourcedNote, ...]:
    return tuple(SourcedNote(text=n["text"], source_ids=tuple(n["source_ids"])) for n in items)


def _summary(data: dict[str, Any]) -> Summary:
    facts_data = data["facts"]
    body = SummaryBody(
        goal=data["goal"],
        constraints=_notes(data["constraints"]),
        decisions=_notes(data["decisions"]),
        open_questions=tuple(
            OpenQuestion(
                text=q["text"], uncertainty=q["uncertainty"], source_ids=tuple(q["source_ids"])
            )
            for q in data["open_questions"]
        ),
        evidence=tuple(
            EvidenceRef(message_id=e["message_id"], note=e["note"], artifact_id=e["artifact_id"])
            for e in data["evidence"]
        ),
    )
    facts = Facts(
        files=tuple(FileFact(**x) for x in facts_data["files"]),
        commands=tuple(CommandFact(**x) for x in facts_data["commands"]),
        failing_tests=tuple(FailingTest(**x) for x in facts_data["failing_tests"]),
        constraints=tuple(Constraint(**x) for x in facts_data["constraints"]),
    )
    return Summary(
        id=data["id"],
        session_id=data["session_id"],
        generation=int(data["generation"]),
        covered_through_seq=int(data["covered_through_seq"]),
        covered_through_message_id=data["covered_through_message_id"],
        source_digest=data["source_digest"],
        body=body,
        facts=facts,
        model=data["model"],
        template_version=data["template_version"],
        created_at=float(data["created_at"]),
        source_tokens=int(data["source_tokens"]),
        summary_tokens=int(data["summary_tokens"]),
        meter=data["meter"],
        trigger=data["trigger"],
        schema_version=SUMMARY_SCHEMA_VERSION,
    )


def summary_from_dict(data: Any) -> Summary:
    return decode(_summary, data, "summary")


def constraint_to_dict(constraint: Constraint) -> dict[str, Any]:
    return {"schema_version": SUMMARY_SCHEMA_VERSION, **_constraint(constraint)}


def constraint_from_dict(data: Any) -> Constraint:
    return decode(
        lambda item: Constraint(text=item["text"], source_message_id=item["source_message_id"]),
        data,
        "constraint",
    )
