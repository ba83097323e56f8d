"""How ``plait eval compaction`` scores answers and sums repeats (pure functions)."""

from __future__ import annotations

import math

import pytest

from plait.domain.messages import AssistantMessage, Message, ToolCall, UserMessage
from plait.eval.scoring import cited_ids, metrics, score_evidence, score_task, spread
from plait.eval.trajectory import Constraint, Question, Trajectory

RAW: dict[str, Message] = {
    "m1": UserMessage(id="m1", text="Fix the export.", created_at=1.0),
    "m2": AssistantMessage(id="m2", text="KeyError: 'XDR' in ledger.py", created_at=2.0),
    "m3": AssistantMessage(id="m3", text="Looked at module 3.", created_at=3.0),
}
EVIDENCE = Question(
    id="e",
    kind="evidence",
    text="Which exception?",
    find="(KeyError: '\\w+')",
    query="KeyError",
    answer="KeyError: 'XDR'",
    evidence="KeyError: 'XDR'",
)
TASK = Question(
    id="t",
    kind="task",
    text="Continue.",
    find="Next step: (.+)",
    query="next step",
    expect=("src/ledger.py",),
    stale=("src/old.py",),
    constraints=("vendored",),
)
TRAJECTORY = Trajectory(
    name="t",
    shape="s",
    window=4_000,
    units=tuple((m,) for m in RAW.values()),
    questions=(EVIDENCE, TASK),
    constraints=(Constraint(id="vendored", forbid="third_party/"),),
)


def answer(text: str) -> list[Message]:
    return [AssistantMessage(id="a", text=text, created_at=9.0)]


def writes(*paths: str, tool: str = "write_file") -> list[Message]:
    calls = tuple(
        ToolCall.create(id=f"c{n}", name=tool, arguments={"path": p}) for n, p in enumerate(paths)
    )
    return [AssistantMessage(id="w", text="", created_at=9.0, tool_calls=calls), *answer("done")]


def test_cited_ids_reads_single_and_grouped_citations_once() -> None:
    assert cited_ids("KeyError [m2] and again [m2, m40] [ m5 ]") == ["m2", "m40"]
    assert cited_ids("no citation here") == []


def test_a_right_answer_citing_the_message_that_holds_the_evidence_is_correct() -> None:
    got = score_evidence(EVIDENCE, RAW, answer("It was KeyError: 'XDR' [m2]."), "completed")
    assert got["correct"] and got["citation_ok"] and got["answered"]
    assert got["cited"] == ["m2"] and got["why"] is None


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("KeyError: 'XDR'", "cites no message"),
        ("KeyError: 'XDR' [m3]", "none of m3 holds the evidence"),
        ("KeyError: 'XDR' [m2, m99]", "cites m99, which is not in the session's history"),
    ],
)
def test_a_wrong_citation_makes_a_right_answer_wrong(text: str, why: str) -> None:
    got = score_evidence(EVIDENCE, RAW, answer(text), "completed")
    assert got["answered"] is True
    assert got["citation_ok"] is False and got["correct"] is False
    assert why in got["why"]


def test_a_wrong_answer_is_wrong_even_with_a_good_citation() -> None:
    got = score_evidence(EVIDENCE, RAW, answer("ValueError [m2]"), "completed")
    assert got["citation_ok"] is True and got["correct"] is False
    assert "does not contain" in got["why"]


def test_a_task_continues_when_it_writes_what_is_expected() -> None:
    got = score_task(TASK, TRAJECTORY, writes("src/ledger.py"), "completed")
    assert got["continued"] is True and got["violated"] == [] and got["why"] is None


def test_a_write_under_a_forbidden_path_is_a_violation() -> None:
    got = score_task(TASK, TRAJECTORY, writes("src/ledger.py", "third_party/x.py"), "completed")
    assert got["violated"] == ["vendored"]
    assert got["continued"] is True  # continuation and violation are counted apart
    reading = score_task(
        TASK, TRAJECTORY, writes("third_party/x.py", tool="read_file"), "completed"
    )
    assert reading["violated"] == []  # the constraint covers writing tools only


@pytest.mark.parametrize(
    ("added", "status", "why"),
    [
        (writes("src/other.py"), "completed", "did not write src/ledger.py"),
        (writes("src/ledger.py", "src/old.py"), "completed", "wrote src/old.py"),
        (writes("src/ledger.py"), "budget_exhausted", "the run ended budget_exhausted"),
    ],
)
def test_a_task_does_not_continue(added: list[Message], status: str, why: str) -> None:
    got = score_task(TASK, TRAJECTORY, added, status)
    assert got["continued"] is False and why in got["why"]


def test_metrics_are_shares_over_the_questions_that_apply() -> None:
    scores = [
        score_task(TASK, TRAJECTORY, writes("src/ledger.py"), "completed"),
        score_task(TASK, TRAJECTORY, writes("third_party/a.py"), "completed"),
        score_evidence(EVIDENCE, RAW, answer("KeyError: 'XDR' [m2]"), "completed"),
        score_evidence(EVIDENCE, RAW, answer("KeyError: 'XDR' [m3]"), "completed"),
        score_evidence(EVIDENCE, RAW, answer("no idea"), "completed"),
    ]
    usage = {"calls": 7, "input_tokens": 100, "output_tokens": 10, "cost_usd": 0.5}
    got = metrics(scores, usage, 1.5)
    assert got == {
        "task_continuation": 0.5,
        "constraint_violation_rate": 0.5,
        "evidence_accuracy": pytest.approx(1 / 3),
        "evidence_answered": pytest.approx(2 / 3),
        "recall_calls": 0,
        "model_calls": 7,
        "input_tokens": 100,
        "output_tokens": 10,
        "cost_usd": 0.5,
        "latency_seconds": 1.5,
    }
    assert metrics([], usage, 0.0)["task_continuation"] is None  # nothing to share
    read_back = [*writes("q", tool="recall"), *writes("q", tool="recall")]
    with_recall = score_evidence(EVIDENCE, RAW, read_back, "completed")
    assert metrics([*scores, with_recall], usage, 1.5)["recall_calls"] == 2


def test_spread_reports_the_sample_variance_over_repeats() -> None:
    got = spread([1.0, 0.0, 1.0, 0.0])
    assert got["mean"] == 0.5 and got["min"] == 0.0 and got["max"] == 1.0
    assert got["variance"] == pytest.approx(1 / 3)
    assert got["stdev"] == pytest.approx(math.sqrt(1 / 3))
    assert spread([0.25])["variance"] == 0.0
    assert spread([0.25, None])["mean"] is None  # unknown in one repeat: unknown
