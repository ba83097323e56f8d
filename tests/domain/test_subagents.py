"""Sub-agent configuration: ``[agents.NAME]`` tables and the Python value."""

from __future__ import annotations

from pathlib import Path

import pytest

from plait.config import load_config
from plait.domain.errors import ValidationError
from plait.domain.subagents import SubAgent, child_ids


def test_agents_tables_merge_project_over_user(tmp_path: Path) -> None:
    home, project = tmp_path / "home", tmp_path / "project"
    (home / ".config" / "plait").mkdir(parents=True)
    project.mkdir()
    (home / ".config" / "plait" / "config.toml").write_text(
        '[agents.counter]\ninstructions = "Count."\nmax_model_calls = 4\n'
    )
    (project / "plait.toml").write_text(
        '[agents.counter]\nmax_model_calls = 9\ntools = ["tally"]\n'
        '[agents.critic]\ninstructions = "Criticize."\nmodel = "scripted:x.yaml"\n'
    )
    config = load_config(cwd=project, env={"HOME": str(home)})
    agents = [SubAgent.from_mapping(n, t) for n, t in config.agents.items()]
    assert agents == [
        SubAgent(name="counter", instructions="Count.", tools=("tally",), max_model_calls=9),
        SubAgent(name="critic", instructions="Criticize.", model="scripted:x.yaml"),
    ]
    assert agents[0].tool_name == "delegate_counter"


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ({"instructions": "x", "budget": 3}, "unknown key 'budget'"),
        ({"instructions": "x", "max_steps": "3"}, "max_steps has the wrong type"),
        ({"instructions": "x", "max_steps": True}, "max_steps has the wrong type"),
        ({"instructions": "x", "tools": [1]}, "tools must be tool names"),
        ({}, "needs instructions"),
        ({"instructions": "x", "max_model_calls": 0}, "must be a positive integer"),
        ({"instructions": "x", "context": "copy"}, "context must be 'fresh' or 'fork'"),
    ],
)
def test_a_bad_agents_table_is_an_error_naming_what(table: dict[str, object], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        SubAgent.from_mapping("counter", table)


def test_a_bad_name_is_refused() -> None:
    with pytest.raises(ValidationError, match="sub-agent name"):
        SubAgent(name="no spaces", instructions="x")


def test_child_ids_are_deterministic_per_call() -> None:
    assert child_ids("idem_a") == child_ids("idem_a")
    assert child_ids("idem_a") != child_ids("idem_b")
    session_id, run_id = child_ids("idem_a")
    assert session_id.startswith("ses_sub_") and run_id.startswith("run_sub_")
