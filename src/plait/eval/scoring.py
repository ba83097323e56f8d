"""How ``plait eval compaction`` scores one answer, and sums scores into metrics.

Pure functions over messages: what a question's run added to its branch, and the raw
history the citations are checked against.
"""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from plait.domain.messages import AssistantMessage, Message, ToolCall, ToolResultMessage
from plait.eval.trajectory import Question, Trajectory

__all__ = [
    "METRICS",
    "cited_ids",
    "metrics",
    "raw_text",
    "score_evidence",
    "score_task",
    "spread",
]

_CITATION = re.compile(r"\[([\w.:-]+(?:\s*,\s*[\w.:-]+)*)\]")

METRICS = (
    "task_continuation",
    "constraint_violation_rate",
    "evidence_accuracy",
    "evidence_answered",
    "recall_calls",
    "model_calls",
    "input_tokens",
    "output_tokens",
    "cost_usd",
    "latency_seconds",
)
"""The figures of one arm in one repeat (see :func:`metrics`)."""


def raw_text(message: Message) -> str:
    """What a message holds in the raw history (a call's arguments included)."""
    if isinstance(message, ToolResultMessage):
        return message.result.content
    if isinstance(message, AssistantMessage):
        return message.text + "".join(f" {c.name} {c.arguments_json}" for c in message.tool_calls)
    return message.text


def _calls(added: Sequence[Message]) -> list[ToolCall]:
    return [c for m in added if isinstance(m, AssistantMessage) for c in m.tool_calls]


def _final_text(added: Sequence[Message]) -> str:
    said = [m.text for m in added if isinstance(m, AssistantMessage) and m.text.strip()]
    return said[-1] if said else ""


def score_task(
    question: Question, trajectory: Trajectory, added: Sequence[Message], status: str
) -> dict[str, Any]:
    """A task continues when its run completed, wrote every expected path and no stale
    one; it violates a constraint when any call of the run breaks one the task is under."""
    calls = _calls(added)
    written = {str(c.arguments().get("path")) for c in calls if c.name == "write_file"}
    missing = [p for p in question.expect if p not in written]
    stale = [p for p in question.stale if p in written]
    violated = sorted(
        {
            cid
            for cid in question.constraints
            for c in calls
            if trajectory.constraint(cid).violated_by(c)
        }
    )
    reasons = []
    if status != "completed":
        reasons.append(f"the run ended {status}")
    reasons += [f"did not write {p}" for p in missing]
    reasons += [
        f"wrote {p}, which an earlier decision named and a later one replaced" for p in stale
    ]
    return {
        "kind": "task",
        "status": status,
        "continued": not reasons,
        "constrained": bool(question.constraints),
        "violated": violated,
        "calls": [f"{c.name} {c.arguments_json}" for c in calls],
        "why": "; ".join(reasons) or None,
    }


def cited_ids(text: str) -> list[str]:
    """The message ids an answer cites, in ``[m12]`` or ``[m12, m40]`` form, in order."""
    ids: list[str] = []
    for group in _CITATION.findall(text):
        ids += [i.strip() for i in group.split(",") if i.strip() not in ids]
    return ids


def score_evidence(
    question: Question, raw: Mapping[str, Message], added: Sequence[Message], status: str
) -> dict[str, Any]:
    """Right when the final answer contains the expected answer and its citations hold up
    against the raw history: at least one id cited, every cited id a message of the
    session, and one of them holding the evidence verbatim."""
    answer = _final_text(added)
    calls = _calls(added)
    answered = question.answer.casefold() in answer.casefold()
    cited = cited_ids(answer)
    problems = []
    if not cited:
        problems.append("cites no message")
    unknown = [i for i in cited if i not in raw]
    problems += [f"cites {i}, which is not in the session's history" for i in unknown]
    holding = [i for i in cited if i in raw and question.evidence in raw_text(raw[i])]
    if cited and not unknown and not holding:
        problems.append(f"none of {', '.join(cited)} holds the evidence")
    citation_ok = bool(holding) and not unknown
    if not answered:
        problems.insert(0, f"the answer does not contain {question.answer!r}")
    return {
        "kind": "evidence",
        "status": status,
        "answer": answer,
        "answered": answered,
        "cited": cited,
        "calls": [f"{c.name} {c.arguments_json}" for c in calls],
        "citation_ok": citation_ok,
        "correct": answered and citation_ok,
        "why": "; ".join(problems) or None,
    }


def _share(hits: int, total: int) -> float | None:
    return None if total == 0 else hits / total


def metrics(
    scores: Sequence[dict[str, Any]], usage: Mapping[str, Any], seconds: float
) -> dict[str, float | None]:
    """One arm's figures in one repeat over all its questions: shares of tasks continued,
    of constrained tasks with a violation, of evidence questions answered right with a
    citation that holds (and answered right at all); how often the answers read originals
    back with ``recall``; the model calls of the arm (the answers, the summaries, the
    steps after a recall) and their tokens and cost; wall time."""
    tasks = [s for s in scores if s["kind"] == "task"]
    constrained = [s for s in tasks if s["constrained"]]
    evidence = [s for s in scores if s["kind"] == "evidence"]
    return {
        "task_continuation": _share(sum(s["continued"] for s in tasks), len(tasks)),
        "constraint_violation_rate": _share(
            sum(bool(s["violated"]) for s in constrained), len(constrained)
        ),
        "evidence_accuracy": _share(sum(s["correct"] for s in evidence), len(evidence)),
        "evidence_answered": _share(sum(s["answered"] for s in evidence), len(evidence)),
        "recall_calls": sum(c.startswith("recall ") for s in scores for c in s["calls"]),
        "model_calls": usage["calls"],
        "input_tokens": usage["input_tokens"],
        "output_tokens": usage["output_tokens"],
        "cost_usd": usage["cost_usd"],
        "latency_seconds": seconds,
    }


def spread(values: Sequence[float | None]) -> dict[str, Any]:
    """Mean, sample variance and standard deviation, min and max over the repeats (the
    variance is 0 for one repeat; ``None`` when the figure is unknown, as a cost without
    prices)."""
    known = [float(v) for v in values if v is not None]
    if not known or len(known) != len(values):
        return {"mean": None, "variance": None, "stdev": None, "min": None, "max": None}
    variance = statistics.variance(known) if len(known) > 1 else 0.0
    return {
        "mean": statistics.fmean(known),
        "variance": variance,
        "stdev": math.sqrt(variance),
        "min": min(known),
        "max": max(known),
    }
