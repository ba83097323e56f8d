"""A generated coding session with planted probes, and the extractive summarizer stand-in.

The benchmarks grow sessions with :func:`generated_round`; ``plait eval compaction``'s
offline reader summarizes with :func:`extractive_summary` (no network, deterministic).
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from plait.application.ports import ModelRequest, ModelResponse
from plait.domain.messages import (
    AssistantMessage,
    Message,
    ToolCall,
    ToolResult,
    ToolResultMessage,
    ToolStatus,
    Usage,
    UserMessage,
)
from plait.domain.record import record

__all__ = ["MODEL", "PROBES", "Probe", "extractive_summary", "generated_round"]

MODEL = "eval-assistant"


@record
class Probe:
    name: str
    at_round: int
    text: str
    """The exact text planted in the session."""
    query: str
    """Key words a model would search for."""
    question: str
    answer: str
    """A substring a correct answer contains."""


PROBES = (
    Probe(
        "constraint",
        0,
        "不要修改部署配置 deploy/prod.yaml",
        "deploy/prod.yaml",
        "Which file must not be modified?",
        "deploy/prod.yaml",
    ),
    Probe(
        "number",
        5,
        "the retry limit must stay at 17",
        "retry limit",
        "What must the retry limit stay at?",
        "17",
    ),
    Probe(
        "error",
        18,
        "ValueError: unexpected token '}' at line 42 of ledger.toml",
        "unexpected token",
        "What exact error did the ledger parser raise?",
        "unexpected token '}' at line 42",
    ),
    Probe(
        "path",
        31,
        "src/shop/ledger_reconcile.py",
        "ledger_reconcile",
        "Which source file holds the reconcile logic?",
        "src/shop/ledger_reconcile.py",
    ),
    Probe(
        "decision",
        44,
        "Decision: pin the parser to version 2.3.1 instead of upgrading",
        "pin parser",
        "Which parser version did we decide to pin?",
        "2.3.1",
    ),
)


def generated_round(round_number: int, first: int) -> list[Message]:
    """Round ``round_number`` of the session (messages numbered from ``first``): a call,
    its output, a note; probes are planted in the round they belong to."""
    probe = next((p for p in PROBES if p.at_round == round_number), None)
    call_args: dict[str, Any] = {"command": f"pytest -q tests/test_mod{round_number}.py"}
    output = f"FAILED tests/test_mod{round_number}.py::test_case - AssertionError\n" + "." * 600
    note = f"Round {round_number}: looked at module {round_number}; still failing."
    user = None
    if probe is not None:
        if probe.name in ("constraint", "number"):
            user = UserMessage(
                id=f"m{first}", text=f"Please continue; {probe.text}.", created_at=first
            )
        elif probe.name == "error":
            output = f"Traceback (most recent call last):\n  ...\n{probe.text}\nexit status 1"
        elif probe.name == "path":
            call_args = {"path": probe.text}
            output = "def reconcile(ledger):\n    ...\n[end of file; 2 lines]"
        else:
            note = probe.text
    out: list[Message] = [user] if user is not None else []
    seq = first + len(out)
    name = "read_file" if "path" in call_args else "run_command"
    status = ToolStatus.SUCCEEDED if name == "read_file" else ToolStatus.FAILED
    out.append(
        AssistantMessage(
            id=f"m{seq}",
            text="",
            created_at=seq,
            model=MODEL,
            tool_calls=(ToolCall.create(id=f"c{round_number}", name=name, arguments=call_args),),
        )
    )
    out.append(
        ToolResultMessage(
            id=f"m{seq + 1}",
            tool_name=name,
            created_at=seq + 1,
            result=ToolResult(call_id=f"c{round_number}", status=status, content=output),
        )
    )
    out.append(AssistantMessage(id=f"m{seq + 2}", text=note, created_at=seq + 2, model=MODEL))
    return out


def extractive_summary(request: ModelRequest) -> ModelResponse:
    """A deterministic summarizer stand-in: the first request as goal, every sentence
    with a requirement as a constraint, assistant decisions as decisions, errors as
    evidence. Never invents an id."""
    text = request.context.items[0].text  # type: ignore[union-attr]
    messages = re.findall(
        r'<message id="([^"]+)" seq="\d+" role="(\w+)"[^>]*>(.*?)</message>', text, re.S
    )
    goal = next((b for _, role, b in messages if role == "user"), "continue the work")
    value: dict[str, Any] = {
        "goal": goal.strip()[:200] or "continue the work",
        "constraints": [
            {"text": b.strip(), "source_ids": [i]}
            for i, role, b in messages
            if role == "user" and re.search(r"不要|must|never", b)
        ],
        "decisions": [
            {"text": b.strip(), "source_ids": [i]}
            for i, role, b in messages
            if role == "assistant" and b.startswith("Decision")
        ],
        "open_questions": [],
        "evidence": [
            {"message_id": i, "artifact_id": None, "note": "error output"}
            for i, role, b in messages
            if role == "tool" and "Error:" in b
        ][-5:],
    }
    out = json.dumps(value)
    sent = len(request.context.instructions) + sum(
        len(getattr(m, "text", "")) for m in request.context.items
    )
    # what a provider would report, estimated at four characters per token
    usage = Usage(input_tokens=math.ceil(sent / 4), output_tokens=math.ceil(len(out) / 4))
    return ModelResponse(structured=value, text=out, model="extractive", usage=usage)
