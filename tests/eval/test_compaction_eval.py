"""``plait eval compaction`` end to end: the set of trajectories through the agent service,
full history against compacted, with the stand-in reader and with models that fail in
known ways."""

from __future__ import annotations

import asyncio
import json
import re
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from plait.application.ports import ModelRequest, ModelResponse, RawToolCall
from plait.domain.errors import ConfigError, ModelError, ValidationError
from plait.domain.messages import UserMessage
from plait.entrypoints.cli.main import main
from plait.eval.compaction import ARMS, report_text, run_eval
from plait.eval.reader import ContextReader
from plait.eval.scoring import METRICS, metrics
from plait.eval.trajectory import load_trajectories, trajectory_names
from plait.testing import FunctionModel

SPREAD = {"mean", "variance", "stdev", "min", "max"}


def evaluate(**options: Any) -> dict[str, Any]:
    return asyncio.run(run_eval(**options))


def reader_with(change: Any, *, names: list[str] | None = None, **caps: Any) -> FunctionModel:
    """The stand-in reader with ``change(request, response)`` applied to its answers."""
    reader = ContextReader(load_trajectories(names))

    async def answer(request: ModelRequest) -> ModelResponse:
        response = await reader.complete(request)
        return response if request.role == "summarizer" else change(request, response)

    return FunctionModel(
        answer, name="changed-reader", capabilities=replace(reader.capabilities, **caps)
    )


def question_scores(report: dict[str, Any], arm: str) -> list[dict[str, Any]]:
    return [
        score
        for run in report["runs"]
        for part in run[arm]["trajectories"].values()
        for score in part["questions"].values()
    ]


def test_the_stand_in_runs_every_trajectory_in_both_arms_and_compaction_happens() -> None:
    report = evaluate()
    assert [t["name"] for t in report["trajectories"]] == trajectory_names()
    (run,) = report["runs"]
    for name in trajectory_names():
        assert run["full"]["trajectories"][name]["compactions"] == 0
        assert run["compacted"]["trajectories"][name]["compactions"] >= 1, name
        compacted = run["compacted"]["trajectories"][name]["usage"]["by_role"]
        assert compacted["summarizer"]["calls"] >= 1  # the summaries count in the cost
        assert compacted["summarizer"]["input_tokens"] > 0
        assert "summarizer" not in run["full"]["trajectories"][name]["usage"]["by_role"]
    # the reader sees the whole history in the full arm: everything is right there
    full = run["full"]["metrics"]
    assert full["task_continuation"] == 1.0
    assert full["constraint_violation_rate"] == 0.0
    assert full["evidence_accuracy"] == 1.0
    # in the compacted arm evidence a summary left out is read back with recall, and the
    # figures are what the per-question scores say
    calls = [
        c for s in question_scores(report, "compacted") if s["kind"] == "task" for c in s["calls"]
    ]
    assert any(c.startswith("recall ") for c in calls)
    for arm in ARMS:
        per = run[arm]["trajectories"].values()
        usage = {
            "calls": sum(p["usage"]["calls"] for p in per),
            "input_tokens": sum(p["usage"]["input_tokens"] for p in per),
            "output_tokens": sum(p["usage"]["output_tokens"] for p in per),
            "cost_usd": None,
        }
        seconds = run[arm]["metrics"]["latency_seconds"]
        assert run[arm]["metrics"] == metrics(question_scores(report, arm), usage, seconds)
        assert seconds > 0
    assert full["model_calls"] < run["compacted"]["metrics"]["model_calls"]


def test_answers_citing_a_message_without_the_evidence_score_zero() -> None:
    def cite_first_message(request: ModelRequest, response: ModelResponse) -> ModelResponse:
        return replace(response, text=re.sub(r"\[[^\]]+\]", "[m1]", response.text))

    report = evaluate(model=reader_with(cite_first_message), trajectories=["debugging"])
    for arm in ARMS:
        assert report["metrics"][arm]["evidence_answered"]["mean"] == 1.0
        assert report["metrics"][arm]["evidence_accuracy"]["mean"] == 0.0
    for score in question_scores(report, "full"):
        if score["kind"] == "evidence":
            assert score["cited"] == ["m1"] and "none of m1 holds the evidence" in score["why"]


def test_a_model_that_writes_a_forbidden_path_is_counted_as_a_violation() -> None:
    def also_forbidden(request: ModelRequest, response: ModelResponse) -> ModelResponse:
        if not any(c.name == "write_file" for c in response.tool_calls):
            return response
        bad = RawToolCall(
            id="bad", name="write_file", arguments={"path": "deploy/prod.yaml", "content": "x"}
        )
        return replace(response, tool_calls=(*response.tool_calls, bad))

    report = evaluate(model=reader_with(also_forbidden), trajectories=["refactor"])
    for arm in ARMS:
        assert report["metrics"][arm]["constraint_violation_rate"]["mean"] == 1.0
        (task,) = [s for s in question_scores(report, arm) if s["kind"] == "task"]
        assert task["violated"] == ["no-deploy"]


def test_repeats_report_the_variance_of_a_model_that_varies() -> None:
    seen: dict[str, int] = {}
    asked: Counter[str] = Counter()

    def wrong_on_even_repeats(request: ModelRequest, response: ModelResponse) -> ModelResponse:
        question = [m for m in request.context.items if isinstance(m, UserMessage)][-1]
        if question.id not in seen:  # the first call of a question's run
            asked[question.text] += 1
            seen[question.id] = asked[question.text]
        repeat = (seen[question.id] - 1) // len(ARMS)  # each repeat asks it once per arm
        if repeat % 2 == 1 and not response.tool_calls:
            return replace(response, text="I do not know.")
        return response

    model = reader_with(wrong_on_even_repeats, names=["many-files"])
    report = evaluate(model=model, trajectories=["many-files"], repeat=4)
    assert report["repeat"] == 4 and len(report["runs"]) == 4
    for arm in ARMS:
        figure = report["metrics"][arm]["evidence_accuracy"]
        values = [r[arm]["metrics"]["evidence_accuracy"] for r in report["runs"]]
        assert values == [1.0, 0.0, 1.0, 0.0]
        assert figure["mean"] == 0.5 and figure["min"] == 0.0 and figure["max"] == 1.0
        assert figure["variance"] == pytest.approx(1 / 3)
        # the deterministic parts do not vary
        assert report["metrics"][arm]["model_calls"]["variance"] == 0.0


def test_cost_comes_from_the_models_prices_over_every_call() -> None:
    model = reader_with(
        lambda request, response: response,
        names=["decisions"],
        price_input_per_mtok=2.0,
        price_output_per_mtok=8.0,
    )
    report = evaluate(model=model, trajectories=["decisions"])
    for arm in ARMS:
        figures = report["runs"][0][arm]["metrics"]
        expected = (figures["input_tokens"] * 2.0 + figures["output_tokens"] * 8.0) / 1e6
        assert figures["cost_usd"] == pytest.approx(expected)
        assert report["metrics"][arm]["cost_usd"]["mean"] == pytest.approx(expected)
    assert evaluate(trajectories=["decisions"])["metrics"]["full"]["cost_usd"]["mean"] is None


def test_a_failing_model_scores_every_question_wrong_with_the_reason() -> None:
    def down(request: ModelRequest, response: ModelResponse) -> ModelResponse:
        raise ModelError("provider down", model_code="INVALID_REQUEST")

    report = evaluate(model=reader_with(down, names=["decisions"]), trajectories=["decisions"])
    for arm in ARMS:
        assert report["metrics"][arm]["task_continuation"]["mean"] == 0.0
        assert report["metrics"][arm]["evidence_accuracy"]["mean"] == 0.0
        for score in question_scores(report, arm):
            assert score["status"] == "failed"
            assert "provider down" in score["error"]
    assert "decisions/where: the answer does not contain" in report_text(report)
    assert "provider down" in report_text(report)


def test_bad_arguments_are_errors() -> None:
    with pytest.raises(ValidationError, match="repeat must be a positive integer, got 0"):
        evaluate(repeat=0)
    with pytest.raises(ValidationError, match="unknown trajectory 'nope'"):
        evaluate(trajectories=["nope"])
    windowless = reader_with(lambda r, s: s, context_window=None)
    with pytest.raises(ConfigError, match="declares no context window"):
        evaluate(model=windowless, trajectories=["decisions"])


# --- the command ----------------------------------------------------------------------------


def test_the_command_prints_json_with_every_metric_per_arm(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["eval", "compaction", "--repeat", "2", "--trajectory", "decisions"]
    assert main([*argv, "--trajectory", "refactor", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert set(report) == {"model", "repeat", "trajectories", "metrics", "runs"}
    assert report["model"] == "stand-in-reader" and report["repeat"] == 2
    assert [t["name"] for t in report["trajectories"]] == ["decisions", "refactor"]
    assert set(report["metrics"]) == set(ARMS)
    for arm in ARMS:
        assert list(report["metrics"][arm]) == list(METRICS)
        for figure in report["metrics"][arm].values():
            assert set(figure) == SPREAD
    assert len(report["runs"]) == 2
    assert set(report["runs"][0]["full"]["trajectories"]) == {"decisions", "refactor"}


def test_the_command_prints_a_table(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["eval", "compaction", "--repeat", "1", "--trajectory", "refactor"]) == 0
    out = capsys.readouterr().out
    assert "full history" in out and "compacted" in out
    assert re.search(r"task continuation\s+100% ± 0%", out)
    assert re.search(r"evidence right, citation holds\s+100% ± 0%\s+100% ± 0%", out)


def test_the_command_answers_with_the_model_given(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script = tmp_path / "no-window.yaml"
    script.write_text("version: 1\ncapabilities:\n  context_window: null\nassistant: []\n")
    assert main(["eval", "compaction", "--model", f"scripted:{script}"]) == 2
    assert "model 'scripted' declares no context window" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--repeat", "0"], "--repeat must be at least 1, got 0"),
        (["--trajectory", "nope"], "unknown trajectory 'nope'; known: debugging, decisions"),
    ],
)
def test_the_command_refuses_bad_input(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["eval", "compaction", *argv]) == 2
    assert message in capsys.readouterr().err
