"""The compaction evaluation's deterministic parts (scripted stand-in summarizer)."""

from __future__ import annotations

import json

import pytest

from plait.adapters.cli.main import main
from plait.application.ports import ModelCapabilities, ModelRequest, ModelResponse
from plait.domain.errors import ModelError
from plait.domain.messages import AssistantMessage, ToolResultMessage
from plait.eval.compaction import PROBES, extractive_summary, run_eval
from plait.testing import FunctionModel
from tests.compaction.conftest import run


def test_eval_plants_probes_compacts_repeatedly_and_scores() -> None:
    report = run(run_eval(rounds=120)).to_json()
    assert report["compactions"] >= 2
    assert set(report["probes"]) == {p.name for p in PROBES}
    assert report["probe_accuracy"]["recall"] == "5/5"
    for name in ("constraint", "number", "decision", "path"):
        assert report["probes"][name]["in_context"] is True, name
    assert report["probe_accuracy"]["answer_compacted"] is None  # no real model
    sent = report["tokens_sent"]
    assert sent["with_compaction"]["total"] < sent["without_compaction"]["total"]
    assert sent["with_compaction"]["last"] < sent["without_compaction"]["last"] / 2


def test_plait_eval_compaction_cli(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["eval", "compaction", "--rounds", "60", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["rounds"] == 60 and report["probe_accuracy"]["recall"] == "5/5"
    assert main(["eval", "compaction", "--rounds", "3"]) == 2
    assert "--rounds must be at least 10" in capsys.readouterr().err


def _oracle(request: ModelRequest) -> ModelResponse:
    """Summarizes like the stand-in; answers by echoing everything it was shown, so an
    answer is right exactly when the probe's fact is visible to the model."""
    if request.role == "summarizer":
        return extractive_summary(request)
    ctx = request.context
    shown = [repr(ctx.compacted)]
    for item in ctx.items:
        if isinstance(item, ToolResultMessage):
            shown.append(item.result.content)
        elif isinstance(item, AssistantMessage):
            shown.append(item.text + " ".join(c.arguments_json for c in item.tool_calls))
        else:
            shown.append(item.text)
    return ModelResponse(text="\n".join(shown))


def test_eval_with_a_model_scores_answers_from_compacted_and_full_history() -> None:
    caps = ModelCapabilities(context_window=64_000, structured_output=True)
    model = FunctionModel(_oracle, name="oracle", capabilities=caps)
    report = run(run_eval(rounds=120, model=model)).to_json()
    assert report["compactions"] >= 2
    probes = report["probes"]
    assert all(probes[p.name]["answer_full"] is True for p in PROBES)
    for p in PROBES:  # the compacted answer is right where the fact stayed visible
        if probes[p.name]["in_context"]:
            assert probes[p.name]["answer_compacted"] is True, p.name
    assert report["probe_accuracy"]["answer_full"] == f"{len(PROBES)}/{len(PROBES)}"
    assert report["probe_accuracy"]["answer_compacted"] is not None


def test_eval_scores_a_failing_answer_call_as_wrong_with_its_reason() -> None:
    def flaky(request: ModelRequest) -> ModelResponse:
        if request.role == "summarizer":
            return extractive_summary(request)
        raise ModelError("provider down", model_code="TRANSIENT")

    caps = ModelCapabilities(context_window=64_000, structured_output=True)
    model = FunctionModel(flaky, name="flaky", capabilities=caps)
    report = run(run_eval(rounds=40, model=model)).to_json()
    for p in PROBES:
        assert report["probes"][p.name]["answer_full"] is False
        assert "provider down" in report["probes"][p.name]["answer_full_error"]
    assert report["probe_accuracy"]["answer_full"] == f"0/{len(PROBES)}"
