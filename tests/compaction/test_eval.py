"""The compaction evaluation's deterministic parts (scripted stand-in summarizer)."""

from __future__ import annotations

import json

import pytest

from plait.adapters.cli.main import main
from plait.eval.compaction import PROBES, run_eval
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
