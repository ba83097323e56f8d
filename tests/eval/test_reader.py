"""The offline stand-in reader: answers only from what it is shown."""

from __future__ import annotations

import asyncio

from plait.application.ports import ModelRequest, ModelResponse
from plait.domain.context import Context
from plait.domain.messages import (
    AssistantMessage,
    Message,
    ToolResult,
    ToolResultMessage,
    ToolStatus,
    UserMessage,
)
from plait.eval.reader import ContextReader
from plait.eval.trajectory import load_trajectories

(DEBUGGING,) = load_trajectories(["debugging"])
FIX, EXCEPTION, _ = DEBUGGING.questions


def ask(items: list[Message]) -> ModelResponse:
    reader = ContextReader([DEBUGGING])
    context = Context(instructions="", tools=(), items=items, output_type=AssistantMessage)
    return asyncio.run(reader.complete(ModelRequest(role="assistant", context=context)))


def user(text: str, id: str = "q") -> UserMessage:
    return UserMessage(id=id, text=text, created_at=0.0)


def tool(name: str, content: str, id: str = "r") -> ToolResultMessage:
    result = ToolResult(call_id="c", status=ToolStatus.SUCCEEDED, content=content)
    return ToolResultMessage(id=id, tool_name=name, created_at=0.0, result=result)


def test_evidence_seen_without_an_id_is_looked_up_with_recall_before_citing() -> None:
    raw = tool("run_command", "Traceback ...\nKeyError: 'XDR'\nexit status 1", id="m3")
    first = ask([raw, user(EXCEPTION.text)])
    (call,) = first.tool_calls
    assert call.name == "recall" and call.arguments == {"query": EXCEPTION.query}
    assert first.text == ""  # no citation of an id it was never shown
    recalled = tool("recall", "messages, newest first (1):\n- seq 3 m3: …KeyError: 'XDR'\nexit…")
    answer = ask([raw, user(EXCEPTION.text), recalled])
    assert answer.text == "KeyError: 'XDR' [m3]" and not answer.tool_calls


def test_after_recall_an_unciteable_fact_is_answered_without_a_citation() -> None:
    raw = tool("run_command", "KeyError: 'XDR'", id="m3")
    answer = ask([raw, user(EXCEPTION.text), tool("recall", "missing: anything matching")])
    assert answer.text.startswith("KeyError: 'XDR'") and "[" not in answer.text


def test_a_summary_line_is_cited_by_its_source_ids() -> None:
    preamble = user("[plait context]\n- decision: KeyError: 'EUR' seen [m7, m9]", id="ctx_p")
    assert ask([preamble, user(EXCEPTION.text)]).text == "KeyError: 'EUR' [m7, m9]"


def test_a_task_follows_the_newest_plan_and_skips_what_a_visible_rule_forbids() -> None:
    items: list[Message] = [
        user("Fix it. The vendored directory third_party/ is off limits: synced nightly.", "m1"),
        AssistantMessage(id="m2", text="Next step: patch old.py to handle x.", created_at=0.0),
        AssistantMessage(
            id="m3",
            text="Next step: patch src/a.py and third_party/lib/b.py to handle x.",
            created_at=0.0,
        ),
        user(FIX.text),
    ]
    calls = ask(items).tool_calls
    assert [(c.name, c.arguments) for c in calls] == [
        (
            "write_file",
            {"path": "src/a.py", "content": "# edited by the plan's next step: src/a.py\n"},
        )
    ]
    # without the rule in view the reader writes both, as a model that lost it would
    calls = ask(items[1:]).tool_calls
    assert [str(c.arguments) for c in calls] == [
        str({"path": p, "content": f"# edited by the plan's next step: {p}\n"})
        for p in ("src/a.py", "third_party/lib/b.py")
    ]
    done = ask([*items, tool("write_file", "wrote 1 characters to src/a.py")])
    assert done.text == "Done." and not done.tool_calls
