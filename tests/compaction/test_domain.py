"""Pure compaction rules: cut points, budgets, the policy, summary validation, facts."""

from __future__ import annotations

from dataclasses import replace
from itertools import accumulate

import pytest

from plait.domain.compaction import (
    CompactionSettings,
    ContextBudget,
    cut_points,
    plan_compaction,
)
from plait.domain.errors import SummaryInvalidError, ValidationError
from plait.domain.facts import extract_constraints, harvest_facts, merge_facts
from plait.domain.messages import Message, ToolStatus, UserMessage
from plait.domain.summary import (
    CommandFact,
    Constraint,
    FailingTest,
    FileFact,
    Summary,
    SummaryBody,
    parse_summary_body,
    source_digest,
    summary_problems,
)
from tests.contract.builders import assistant, tool_result, user


def tool_history() -> list[Message]:
    """m1 user; m2 calls c1+c2; m3, m4 results; m5 answer; m6 user; m7 calls c3 (open)."""
    return [
        user("m1", "run the tests"),
        assistant("m2", ("c1", "read_file", {"path": "a.py"}), ("c2", "run_tests", {})),
        tool_result("m3", "c1"),
        tool_result("m4", "c2"),
        assistant("m5", text="done"),
        user("m6", "again"),
        assistant("m7", ("c3", "run_tests", {})),
    ]


def test_cut_points_never_split_a_call_from_its_results() -> None:
    assert cut_points(tool_history()) == [1, 4, 5, 6]


def test_budget_relation_and_errors() -> None:
    b = ContextBudget(window=32_000, reserved_output=4_000, safety_margin=2_000)
    assert b.input_budget == 26_000
    with pytest.raises(ValidationError, match="leave nothing"):
        ContextBudget(window=100, reserved_output=90, safety_margin=10)
    with pytest.raises(ValidationError, match="positive window"):
        ContextBudget(window=0, reserved_output=0, safety_margin=0)
    s = CompactionSettings()
    assert s.retained_for(100_000) == 16_000
    assert s.budget_for(128_000, 8_192) == ContextBudget(
        window=128_000, reserved_output=8_192, safety_margin=2_560
    )
    assert s.budget_for(32_000, None).reserved_output == 4_000


@pytest.mark.parametrize(
    ("field", "value"),
    [("threshold", 0.0), ("threshold", 1.5), ("summary_retries", -1), ("summary_max_tokens", 0)],
)
def test_bad_settings_are_named(field: str, value: float) -> None:
    with pytest.raises(ValidationError, match=field):
        CompactionSettings(**{field: value})  # type: ignore[arg-type]


def prefix(counts: list[int]) -> list[int]:
    return [0, *accumulate(counts)]


def test_policy_keeps_newest_units_within_retained_tokens() -> None:
    # units: [m1] [m2..m4] [m5] [m6] and the open tail [m7]
    pt = prefix([10, 10, 100, 100, 10, 10, 10])
    cuts = cut_points(tool_history())
    plan = plan_compaction(
        prefix_tokens=pt, cuts=cuts, already_covered=0, retained_tokens=30, trigger="pressure"
    )
    assert plan is not None
    assert plan.covered_through == 4  # m5.. kept: 30 tokens
    assert (plan.source_tokens, plan.kept_tokens) == (220, 30)


def test_policy_overflow_keeps_only_the_newest_unit() -> None:
    msgs = tool_history()[:6]  # all settled; newest unit is [m6]
    pt = prefix([10, 10, 100, 100, 10, 10])
    plan = plan_compaction(
        prefix_tokens=pt,
        cuts=cut_points(msgs),
        already_covered=0,
        retained_tokens=10_000,
        trigger="overflow",
    )
    assert plan is not None and plan.covered_through == 5


def test_policy_never_covers_the_unsettled_tail_or_goes_backwards() -> None:
    pt = prefix([10, 10, 100, 100, 10, 10, 10])
    cuts = cut_points(tool_history())
    plan = plan_compaction(
        prefix_tokens=pt, cuts=cuts, already_covered=0, retained_tokens=0, trigger="pressure"
    )
    assert plan is not None and plan.covered_through == 6  # m7 (open call) stays raw
    assert (
        plan_compaction(
            prefix_tokens=pt, cuts=cuts, already_covered=6, retained_tokens=0, trigger="overflow"
        )
        is None
    )
    one = [user("m1")]
    assert (
        plan_compaction(
            prefix_tokens=[0, 5],
            cuts=cut_points(one),
            already_covered=0,
            retained_tokens=0,
            trigger="overflow",
        )
        is None
    )


def a_summary(prefix_ids: list[str], body: SummaryBody, **kw: object) -> Summary:
    base = Summary(
        id="s",
        session_id="ses",
        generation=1,
        covered_through_seq=len(prefix_ids),
        covered_through_message_id=prefix_ids[-1],
        source_digest=source_digest(prefix_ids),
        body=body,
        source_tokens=1000,
        summary_tokens=100,
    )
    return replace(base, **kw)  # type: ignore[arg-type]


def test_summary_validation() -> None:
    ids = ["m1", "m2", "m3"]
    body = parse_summary_body(
        {
            "goal": "fix it",
            "constraints": [{"text": "不要修改部署配置", "source_ids": ["m1"]}],
            "open_questions": [
                {"text": "cause?", "uncertainty": "unverified", "source_ids": ["m3"]}
            ],
            "evidence": [{"message_id": "m3", "note": "the log"}],
        }
    )
    assert summary_problems(a_summary(ids, body), ids) == []
    later = replace(body, evidence=(*body.evidence, replace(body.evidence[0], message_id="m9")))
    assert "outside the covered prefix: m9" in summary_problems(a_summary(ids, later), ids)[0]
    big = a_summary(ids, body, summary_tokens=1000)
    assert any("not smaller" in p for p in summary_problems(big, ids))
    moved = a_summary(["m1", "mX", "m3"], body)
    assert any("source_digest" in p for p in summary_problems(moved, ids))


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ([], "JSON object"),
        ({"goal": 3}, "summary.goal must be a string"),
        ({"goal": "g", "decisions": [{"text": "d"}]}, "decisions[0].source_ids"),
        ({"goal": "g", "open_questions": [{"text": "q", "source_ids": ["m1"]}]}, "uncertainty"),
        ({"goal": "g", "surprise": 1}, "unknown keys: surprise"),
        ({"goal": "g", "evidence": [{"note": "x"}]}, "evidence[0].message_id"),
    ],
)
def test_malformed_summary_output_is_rejected(value: object, problem: str) -> None:
    with pytest.raises(SummaryInvalidError) as e:
        parse_summary_body(value)
    assert any(problem in p for p in e.value.details["problems"])


def test_constraints_are_explicit_requirements_verbatim() -> None:
    m = UserMessage(
        id="m1",
        text="修复失败的测试。不要修改部署配置，也不要删除已有文件。Never push to main. Thanks!",
        created_at=0,
    )
    assert extract_constraints(m) == [
        Constraint(text="不要修改部署配置，也不要删除已有文件。", source_message_id="m1"),
        Constraint(text="Never push to main.", source_message_id="m1"),
    ]


def test_facts_are_harvested_exactly_with_sources() -> None:
    sha = "ab" * 32
    msgs: list[Message] = [
        user("m1", "不要修改部署配置"),
        assistant(
            "m2",
            ("c1", "read_file", {"path": "src/a.py"}),
            ("c2", "write_file", {"path": "src/b.py", "content": "x"}),
            ("c3", "run_command", {"command": "pytest -q"}),
            ("c4", "edit_file", {"path": "deploy.yaml"}),
        ),
        tool_result("m3", "c1", f"print(1)\n[end of file; 1 line; sha256 {sha}]"),
        tool_result("m4", "c2", f"created 'src/b.py': 1 byte written; sha256 {sha}"),
        tool_result(
            "m5",
            "c3",
            "FAILED tests/test_a.py::test_parse - AssertionError\nexit status 1",
            ToolStatus.FAILED,
        ),
        tool_result("m6", "c4", "no match", ToolStatus.FAILED),
    ]
    facts = harvest_facts(msgs)
    assert facts.files == (
        FileFact(
            path="src/a.py", action="read", content_hash=f"sha256:{sha}", source_message_id="m3"
        ),
        FileFact(
            path="src/b.py", action="written", content_hash=f"sha256:{sha}", source_message_id="m4"
        ),
    )
    assert facts.commands == (
        CommandFact(
            command="pytest -q", exit_status=1, tool_status="failed", source_message_id="m5"
        ),
    )
    assert facts.failing_tests == (
        FailingTest(name="tests/test_a.py::test_parse", source_message_id="m5"),
    )
    assert facts.constraints == (Constraint(text="不要修改部署配置", source_message_id="m1"),)
    merged = merge_facts(facts, harvest_facts([user("m7", "不要修改部署配置")]))
    assert [c.source_message_id for c in merged.constraints] == ["m1", "m7"]


def test_the_scripted_position_counts_the_turns_a_summary_replaced() -> None:
    import asyncio

    from plait.application.ports import ModelRequest
    from plait.domain.context import CompactedRange, Context
    from plait.domain.messages import AssistantMessage
    from plait.testing import ScriptedModel

    model = ScriptedModel(
        {"version": 1, "assistant": [{"text": "a"}, {"text": "b"}, {"text": "c"}]}
    )
    compacted = CompactedRange(
        summary_id="s",
        generation=1,
        covered_through_seq=4,
        omitted_messages=4,
        omitted_assistant_messages=2,
    )
    context: Context[AssistantMessage] = Context(
        instructions="",
        tools=(),
        items=[user("ctx_preamble_x", "summary")],
        output_type=AssistantMessage,
        compacted=compacted,
    )
    response = asyncio.run(model.complete(ModelRequest(role="assistant", context=context)))
    assert response.text == "c"
