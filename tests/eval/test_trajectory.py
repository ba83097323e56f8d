"""The trajectory format of ``plait eval compaction`` and the shipped set."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from plait.domain.errors import ValidationError
from plait.domain.messages import AssistantMessage, ToolResultMessage, UserMessage
from plait.eval.trajectory import load_trajectories, parse_trajectory, trajectory_names


def test_the_shipped_set_has_several_long_trajectories_of_different_shapes() -> None:
    trajectories = load_trajectories()
    assert [t.name for t in trajectories] == trajectory_names()
    assert len(trajectories) >= 4
    assert len({t.shape for t in trajectories}) == len(trajectories)
    for t in trajectories:
        assert len(t.messages) >= 100, t.name
        assert {q.kind for q in t.questions} == {"task", "evidence"}, t.name
    questions = [q for t in trajectories for q in t.questions]
    assert any(q.constraints for q in questions)  # a constraint to keep
    assert any(q.stale for q in questions)  # a decision that was replaced
    assert sum(q.kind == "evidence" for q in questions) >= 4  # evidence to cite
    # every evidence question's evidence is really in its trajectory's raw history
    for t in trajectories:
        texts = [m.result.content for m in t.messages if isinstance(m, ToolResultMessage)]
        texts += [m.text for m in t.messages if not isinstance(m, ToolResultMessage)]
        for q in t.questions:
            if q.kind == "evidence":
                assert any(q.evidence in text for text in texts), (t.name, q.id)


def test_an_unknown_trajectory_name_lists_the_known_ones() -> None:
    with pytest.raises(ValidationError, match="unknown trajectory 'nope'; known: debugging"):
        load_trajectories(["nope"])


MINIMAL: dict[str, Any] = {
    "name": "tiny",
    "shape": "a tiny one",
    "window": 2000,
    "events": [
        {"user": "Do the thing."},
        {
            "repeat": 2,
            "events": [
                {"call": "run_command", "args": {"command": "step {i}"}, "output": "ok {i}"},
                {"assistant": "did {i}"},
            ],
        },
        {"call": "read_file", "args": {"path": "a.txt"}, "output": "x", "pad": 120},
    ],
    "constraints": [{"id": "c", "forbid": "secret/"}],
    "questions": [
        {
            "id": "q",
            "kind": "task",
            "text": "go",
            "find": "did (\\d)",
            "query": "did",
            "expect": ["a.txt"],
            "constraints": ["c"],
        }
    ],
}


def test_events_expand_into_numbered_complete_units() -> None:
    t = parse_trajectory(copy.deepcopy(MINIMAL), "tiny")
    assert [len(u) for u in t.units] == [1, 2, 1, 2, 1, 2]
    ids = [m.id for m in t.messages]
    assert ids == [f"m{n}" for n in range(1, 10)]
    first_call, second_note = t.units[1][0], t.units[4][0]
    assert isinstance(t.units[0][0], UserMessage)
    assert isinstance(first_call, AssistantMessage)
    assert first_call.tool_calls[0].arguments() == {"command": "step 1"}
    assert isinstance(second_note, AssistantMessage) and second_note.text == "did 2"
    padded = t.units[5][1]
    assert isinstance(padded, ToolResultMessage)
    assert padded.result.call_id == "c8" and first_call.tool_calls[0].id == "c2"
    assert len(padded.result.content) == len("x\n") + 120


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d.update(extra=1), "unknown key"),
        (lambda d: d.update(name="other"), "differs from the file name"),
        (lambda d: d.update(window=10), "window must be an integer of at least 1000"),
        (lambda d: d["questions"][0].update(kind="quiz"), "kind must be 'task' or 'evidence'"),
        (lambda d: d["questions"][0].update(constraints=["zz"]), "unknown constraint 'zz'"),
        (lambda d: d["questions"][0].update(find="("), "find is not a regular expression"),
        (lambda d: d["questions"][0].update(expect=[]), "expect must name at least one path"),
        (lambda d: d["events"][1].update(repeat=0), "repeat must be a positive integer"),
        (lambda d: d["events"][2].update(status="maybe"), "status must be 'succeeded'"),
        (lambda d: d.update(questions=[]), "has no questions"),
    ],
)
def test_a_bad_trajectory_is_an_error_naming_the_place(change: Any, message: str) -> None:
    data = copy.deepcopy(MINIMAL)
    change(data)
    with pytest.raises(ValidationError, match=message) as caught:
        parse_trajectory(data, "tiny")
    assert "trajectory tiny" in str(caught.value)
