"""``plait eval compaction``: does compaction keep what a coding session needs?

It generates a long coding session with planted probes — a constraint early on, a
decision in the middle, an exact error string, a file path, a number — compacts it
repeatedly as it grows (the post-step pressure trigger, step by step), and scores each
probe at the end:

- **in context**: the probe's exact text is in what the next model call would see;
- **recall**: the recall tool finds it from a search for its key words;
- **answer** (only with a real ``--model``): the model answers the probe's question
  correctly from the compacted context, and from the full history, for comparison.

It reports probe accuracy, tokens sent per step with and without compaction, and what the
summaries cost. Without ``--model`` the summarizer is a deterministic extractive stand-in
(no network), so the deterministic parts run in CI.
"""

from __future__ import annotations

import json
import math
import re
import statistics
from dataclasses import dataclass, field
from typing import Any

from plait.adapters.stores.memory import MemoryStore
from plait.application.compaction import (
    CompactionService,
    ModelProfile,
    ModelProfiles,
    RunCompaction,
    recall_tool,
)
from plait.application.compaction.estimate import EstimateMeter
from plait.application.ports import (
    Commit,
    ModelCapabilities,
    ModelClient,
    ModelRequest,
    ModelResponse,
    ToolInvocation,
)
from plait.domain.compaction import CompactionSettings
from plait.domain.context import Context
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
from plait.domain.session import Session
from plait.testing import FixedClock, FunctionModel, SequentialIds

__all__ = ["PROBES", "EvalReport", "Probe", "run_eval"]

MODEL = "eval-assistant"
WINDOW = 16_000


@dataclass(frozen=True, slots=True)
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


def _round(r: int, n: int) -> list[Message]:
    """Round ``r`` of the session (messages numbered from ``n``): a call, its output, a
    note; probes are planted in the round they belong to."""
    probe = next((p for p in PROBES if p.at_round == r), None)
    call_args: dict[str, Any] = {"command": f"pytest -q tests/test_mod{r}.py"}
    output = f"FAILED tests/test_mod{r}.py::test_case - AssertionError\n" + "." * 600
    note = f"Round {r}: looked at module {r}; still failing."
    user = None
    if probe is not None:
        if probe.name in ("constraint", "number"):
            user = UserMessage(id=f"m{n}", text=f"Please continue; {probe.text}.", created_at=n)
        elif probe.name == "error":
            output = f"Traceback (most recent call last):\n  ...\n{probe.text}\nexit status 1"
        elif probe.name == "path":
            call_args = {"path": probe.text}
            output = "def reconcile(ledger):\n    ...\n[end of file; 2 lines]"
        else:
            note = probe.text
    out: list[Message] = [user] if user is not None else []
    k = n + len(out)
    name = "read_file" if "path" in call_args else "run_command"
    status = ToolStatus.SUCCEEDED if name == "read_file" else ToolStatus.FAILED
    out.append(
        AssistantMessage(
            id=f"m{k}",
            text="",
            created_at=k,
            model=MODEL,
            tool_calls=(ToolCall.create(id=f"c{r}", name=name, arguments=call_args),),
        )
    )
    out.append(
        ToolResultMessage(
            id=f"m{k + 1}",
            tool_name=name,
            created_at=k + 1,
            result=ToolResult(call_id=f"c{r}", status=status, content=output),
        )
    )
    out.append(AssistantMessage(id=f"m{k + 2}", text=note, created_at=k + 2, model=MODEL))
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


@dataclass
class EvalReport:
    rounds: int
    messages: int
    compactions: int
    summarizer_calls: int
    summarizer_input_tokens: int
    summarizer_output_tokens: int
    tokens_per_step_compacted: list[int] = field(default_factory=list)
    tokens_per_step_full: list[int] = field(default_factory=list)
    probes: dict[str, dict[str, Any]] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        c, f = self.tokens_per_step_compacted, self.tokens_per_step_full
        scored = list(self.probes.values())
        return {
            "rounds": self.rounds,
            "messages": self.messages,
            "compactions": self.compactions,
            "probe_accuracy": {
                key: _share([p[key] for p in scored if p[key] is not None])
                for key in ("in_context", "recall", "answer_compacted", "answer_full")
            },
            "probes": self.probes,
            "tokens_sent": {
                "with_compaction": {"total": sum(c), "mean_per_step": _mean(c), "last": c[-1]},
                "without_compaction": {"total": sum(f), "mean_per_step": _mean(f), "last": f[-1]},
            },
            "summary_cost": {
                "calls": self.summarizer_calls,
                "input_tokens": self.summarizer_input_tokens,
                "output_tokens": self.summarizer_output_tokens,
            },
        }


def _share(values: list[bool]) -> str | None:
    return None if not values else f"{sum(values)}/{len(values)}"


def _mean(values: list[int]) -> int:
    return int(statistics.fmean(values)) if values else 0


def _service(store: MemoryStore, model: ModelClient | None, window: int) -> CompactionService:
    """Compaction over ``store``: the session's model measured by an estimate, and the
    summarizer (``model``, or a deterministic extractive stand-in)."""
    meter = EstimateMeter()
    summarizer = model or FunctionModel(
        extractive_summary,
        name="extractive",
        capabilities=ModelCapabilities(context_window=64_000, structured_output=True),
    )
    caps = summarizer.capabilities
    profiles = [
        ModelProfile(model=MODEL, meter=meter, context_window=window, max_output_tokens=1_000),
        ModelProfile(
            model=summarizer.name,
            meter=meter,
            context_window=caps.context_window or 64_000,
            max_output_tokens=caps.max_output_tokens,
        ),
    ]
    return CompactionService(
        store=store,
        profiles=ModelProfiles(profiles),
        summarizer=summarizer,
        clock=FixedClock(),
        ids=SequentialIds(),
        settings=CompactionSettings(summary_max_tokens=2_000, max_compactions_per_run=1_000),
    )


async def _grow(service: CompactionService, rounds: int, report: EvalReport) -> list[Message]:
    """The session round by round, with the post-step trigger after each round."""
    store = service.store
    await store.create_session(Session(id="eval", created_at=0.0))
    first = UserMessage(id="m1", text="Fix the failing shop tests.", created_at=0.0)
    history: list[Message] = [first]
    await store.commit(Commit(session_id="eval", expected_version=0, messages=(first,)))
    state = RunCompaction()
    for r in range(rounds):
        new = _round(r, len(history) + 1)
        await store.commit(
            Commit(session_id="eval", expected_version=len(history), messages=tuple(new))
        )
        history.extend(new)
        outcome = await service.after_step("eval", history, run=state, instructions="", tools=())
        if outcome is not None:
            report.compactions += outcome.status == "compacted"
            report.summarizer_calls += outcome.summarizer_calls
            report.summarizer_input_tokens += outcome.summarizer_input_tokens
            report.summarizer_output_tokens += outcome.summarizer_output_tokens
        view = await service.view("eval", history, model=MODEL, instructions="", tools=())
        report.tokens_per_step_compacted.append(view.tokens.total)
        report.tokens_per_step_full.append(view.full_history_tokens)
    report.messages = len(history)
    return history


async def run_eval(
    *, rounds: int = 120, model: ModelClient | None = None, window: int = WINDOW
) -> EvalReport:
    """Grow the session round by round with the post-step trigger on, then score."""
    store = MemoryStore()
    service = _service(store, model, window)
    report = EvalReport(rounds, 0, 0, 0, 0, 0)
    history = await _grow(service, rounds, report)
    view = await service.view("eval", history, model=MODEL, instructions="", tools=())
    visible = view.preamble + "\n" + "\n".join(_text(m) for m in view.context.items)
    tool = recall_tool(store)
    for p in PROBES:
        got = await tool.execute(
            ToolInvocation(
                call=ToolCall.create(id="q", name="recall", arguments={"query": p.query}),
                session_id="eval",
                run_id="eval",
                workspace=None,
                idempotency_key="q",
            )
        )
        report.probes[p.name] = {
            "planted_at_round": p.at_round,
            "in_context": p.text in visible,
            "recall": p.text in got.content,
            "answer_compacted": None,
            "answer_full": None,
        }
    if model is not None:
        await _answers(model, view.context, history, report)
    return report


def _text(m: Message) -> str:
    if isinstance(m, ToolResultMessage):
        return m.result.content
    if isinstance(m, AssistantMessage):
        return m.text + " ".join(c.arguments_json for c in m.tool_calls)
    return m.text


async def _answers(
    model: ModelClient, compacted: Context[Any], history: list[Message], report: EvalReport
) -> None:
    """Ask each probe's question from the compacted context and from the full history."""
    for p in PROBES:
        for key, items in (("answer_compacted", list(compacted.items)), ("answer_full", history)):
            question = UserMessage(id=f"q_{p.name}", text=p.question, created_at=0.0)
            context: Context[AssistantMessage] = Context(
                instructions="Answer from the conversation, briefly.",
                tools=(),
                items=[*items, question],
                output_type=AssistantMessage,
                compacted=compacted.compacted if key == "answer_compacted" else None,
            )
            try:
                response = await model.complete(ModelRequest(role="assistant", context=context))
                report.probes[p.name][key] = p.answer.casefold() in response.text.casefold()
            except Exception as e:  # a failed call scores as wrong, with the reason kept
                report.probes[p.name][key] = False
                report.probes[p.name][f"{key}_error"] = f"{type(e).__name__}: {e}"
