"""Sub-agents from ``plait.toml`` through the CLI: the delegation runs, the child's run
names its parent in ``runs list``, and ``sessions tree`` shows the child's session."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli.conftest import Plait, call, check_run, write_script

POLICY = 'version = 1\n[[rules]]\nname = "delegate"\ntools = ["delegate_*"]\naction = "allow"\n'


@pytest.mark.slow
def test_a_configured_sub_agent_runs_as_a_child_shown_in_the_tree(
    plait: Plait, workspace: Path, tmp_path: Path
) -> None:
    lead = write_script(
        tmp_path,
        "lead",
        {
            "version": 1,
            "model": "lead",
            "assistant": [
                {"tool_calls": [call("delegate_reader", "d1", task="What do the notes say?")]},
                {"text": "The reader says hello."},
            ],
        },
    )
    reader = write_script(
        tmp_path,
        "reader",
        {
            "version": 1,
            "model": "reader",
            "assistant": [
                {"tool_calls": [call("read_file", "r1", path="notes.txt")]},
                {"text": "hello plait"},
            ],
        },
    )
    (tmp_path / "plait.toml").write_text(
        f'[agents.reader]\ninstructions = "Read files."\nmodel = "{reader}"\n'
        'tools = ["read_file"]\nmax_model_calls = 4\n'
    )
    (tmp_path / "policy.toml").write_text(POLICY)
    sid = plait.new_session(workspace)
    sent = plait(
        "send", sid, "Ask the reader.", "--model", lead, "--policy", "policy.toml", "--json"
    )
    assert sent.code == 0, sent.err
    assert sent.json["status"] == "completed"
    results = [m for m in sent.json["messages"] if m["kind"] == "tool_result"]
    assert [(m["tool_name"], m["status"], m["content"]) for m in results] == [
        ("delegate_reader", "succeeded", "hello plait")
    ]
    runs = plait.json("runs", "list")["runs"]
    for run in runs:
        check_run(run)
    (child,) = [r for r in runs if r["parent"] is not None]
    assert child["parent"] == {
        "session_id": sid,
        "run_id": sent.json["run_id"],
        "call_id": "d1",
        "agent": "reader",
    }
    assert child["budget"]["max_model_calls"] == 4
    tree = plait.json("sessions", "tree", sid)["roots"]
    (root,) = tree
    assert root["session_id"] == sid and root["delegated_by"] is None
    (node,) = root["children"]
    assert node["session_id"] == child["session_id"]
    assert node["delegated_by"] == child["parent"]
    text = plait.ok("sessions", "tree", sid).out
    assert f"sub-agent reader for call d1 of {sent.json['run_id']}" in text
