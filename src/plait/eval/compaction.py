"""``plait eval compaction``: is compaction worth it, on sessions of several shapes?

The article (§十) asks for a fixed set of long trajectories, each run with full history
and with compaction, under the same model, tools and follow-up questions, reporting task
continuation, constraint violations, evidence accuracy with the citations checked, and
total cost and latency, repeated to show the variance. This module does that:

for each repeat, each trajectory (:mod:`plait.eval.trajectory`) and each arm, a fresh
in-memory runtime grows the session unit by unit. In the ``compacted`` arm the post-step
pressure check runs after every unit against the trajectory's window, so the session is
compacted as it grows (summaries of summaries included); the ``full`` arm keeps the whole
raw history. Then each question is asked on its own fork of the session through the
agent service, with the trajectory's tools and ``recall``, and scored
(:mod:`plait.eval.scoring`). Every model call of an arm (summaries, answers, the steps
that read evidence back) counts in its cost; latency is the arm's wall time.

The model is a real one (``--model``) or the deterministic stand-in reader
(:mod:`plait.eval.reader`), which runs offline and answers only from what it is shown.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from plait.application.compaction import RECALL_SPEC, RunCompaction
from plait.application.gate import AllowAll
from plait.application.model_caller import cost_usd
from plait.application.ports import (
    Commit,
    ModelCapabilities,
    ModelClient,
    ModelRequest,
    ModelResponse,
    Tool,
    ToolInvocation,
    ToolOutput,
)
from plait.domain.compaction import CompactionSettings
from plait.domain.errors import ConfigError, PlaitError, ValidationError
from plait.domain.messages import Message
from plait.domain.runs import Budget
from plait.domain.tools import EffectClass, ToolSpec
from plait.eval.reader import ContextReader
from plait.eval.scoring import METRICS, metrics, score_evidence, score_task, spread
from plait.eval.trajectory import Question, Trajectory, load_trajectories
from plait.runtime import Runtime

__all__ = ["ARMS", "MeteredModel", "report_text", "run_eval", "tool_specs"]

ARMS = ("full", "compacted")
QUESTION_BUDGET = Budget(max_steps=8, max_model_calls=16, deadline_seconds=600.0)
"""Each question's run: enough steps to read evidence back and act, not to wander."""


class MeteredModel:
    """The arm's model: ``inner`` with the arm's context window, counting every call, its
    tokens and its time (a failed call counts too)."""

    def __init__(self, inner: ModelClient, window: int) -> None:
        self.inner = inner
        self._capabilities = replace(inner.capabilities, context_window=window)
        self.calls: Counter[str] = Counter()
        self.input_by_role: Counter[str] = Counter()
        self.output_by_role: Counter[str] = Counter()
        self.seconds = 0.0

    @property
    def name(self) -> str:
        return self.inner.name

    @property
    def capabilities(self) -> ModelCapabilities:
        return self._capabilities

    async def complete(self, request: ModelRequest) -> ModelResponse:
        started = time.perf_counter()
        try:
            response = await self.inner.complete(request)
        finally:
            self.seconds += time.perf_counter() - started
            self.calls[request.role] += 1
        self.input_by_role[request.role] += response.usage.input_tokens
        self.output_by_role[request.role] += response.usage.output_tokens
        return response

    def usage(self) -> dict[str, Any]:
        """Calls, tokens and cost, in all and per role (``assistant``: the answers and
        the steps after a recall; ``summarizer``: the summaries)."""
        given, got = self.input_by_role.total(), self.output_by_role.total()
        return {
            "calls": self.calls.total(),
            "input_tokens": given,
            "output_tokens": got,
            "cost_usd": cost_usd(self.inner.capabilities, given, got),
            "model_seconds": self.seconds,
            "by_role": {
                role: {
                    "calls": self.calls[role],
                    "input_tokens": self.input_by_role[role],
                    "output_tokens": self.output_by_role[role],
                }
                for role in sorted(self.calls)
            },
        }


# --- the trajectory's tools -----------------------------------------------------------------


def _tools(files: Mapping[str, str]) -> list[Tool]:
    """The tools the questions run with, in both arms: ``read_file`` serves the
    trajectory's ``files``, ``write_file`` and ``run_command`` only acknowledge (what they were
    asked to do is what gets scored; nothing outside the evaluation changes)."""

    async def read_file(invocation: ToolInvocation) -> ToolOutput:
        path = str(invocation.call.arguments().get("path", ""))
        if path not in files:
            return ToolOutput(content=f"no such file: {path}", failed=True)
        return ToolOutput(content=files[path])

    async def write_file(invocation: ToolInvocation) -> ToolOutput:
        args = invocation.call.arguments()
        return ToolOutput(
            content=f"wrote {len(str(args.get('content', '')))} characters to {args.get('path')}"
        )

    async def run_command(invocation: ToolInvocation) -> ToolOutput:
        command = invocation.call.arguments().get("command")
        return ToolOutput(content=f"$ {command}\n(recorded by the evaluation, not run)\nexit 0")

    def spec(name: str, description: str, effect: EffectClass, **props: str) -> ToolSpec:
        return ToolSpec(
            name=name,
            description=description,
            parameters={
                "type": "object",
                "properties": {
                    key: {"type": "string", "description": d} for key, d in props.items()
                },
                "required": list(props),
                "additionalProperties": False,
            },
            effect=effect,
        )

    return [
        Tool(
            spec=spec(
                "read_file",
                "Read a file of the project.",
                EffectClass.READ_ONLY,
                path="path relative to the project root",
            ),
            execute=read_file,
        ),
        Tool(
            spec=spec(
                "write_file",
                "Write a file of the project (whole content).",
                EffectClass.IDEMPOTENT,
                path="path relative to the project root",
                content="the file's new content",
            ),
            execute=write_file,
        ),
        Tool(
            spec=spec(
                "run_command",
                "Run a shell command in the project.",
                EffectClass.SIDE_EFFECT,
                command="the command line",
            ),
            execute=run_command,
        ),
    ]


def tool_specs() -> list[ToolSpec]:
    """What the questions' runs offer a model (the same in both arms): the trajectory
    tools and ``recall``; for opening a real model, which checks the schemas up front."""
    return [*(t.spec for t in _tools({})), RECALL_SPEC]


# --- one arm of one trajectory --------------------------------------------------------------


async def _grow(runtime: Runtime, trajectory: Trajectory, arm: str) -> tuple[str, int]:
    """The session, committed unit by unit; in the compacted arm with the post-step check
    after each unit. Returns the session id and how many compactions happened."""
    compaction = runtime.compaction
    if compaction is None:  # the in-memory store keeps summaries; this is a wiring error
        raise ConfigError("the evaluation's store keeps no summaries")
    session = await runtime.service.create_session(title=f"eval {trajectory.name}")
    history: list[Message] = []
    specs = tuple(t.spec for t in runtime.tools)
    model_name = runtime.service.model.name
    state, compactions = RunCompaction(), 0
    for unit in trajectory.units:
        await runtime.store.commit(
            Commit(session_id=session.id, expected_version=len(history), messages=unit)
        )
        history.extend(unit)
        if arm == "compacted":
            outcome = await compaction.after_step(
                session.id,
                history,
                run=state,
                instructions=runtime.instructions,
                tools=specs,
                model=model_name,
            )
            compactions += outcome is not None and outcome.status == "compacted"
    return session.id, compactions


async def _ask(
    runtime: Runtime,
    session_id: str,
    trajectory: Trajectory,
    question: Question,
    raw: dict[str, Message],
) -> dict[str, Any]:
    """The question on its own branch of the grown session, scored."""
    assert runtime.forks is not None  # the in-memory store forks
    last = trajectory.units[-1][-1].id
    fork = await runtime.forks.fork_session(session_id, last, request_id=f"question-{question.id}")
    try:
        result = await runtime.service.send(fork.branch.id, question.text, budget=QUESTION_BUDGET)
        added, status = [sm.message for sm in result.messages], result.run.status.value
        error = None if result.run.error is None else result.run.error.message
    except PlaitError as exc:
        added, status, error = [], "failed", f"{type(exc).__name__}: {exc}"
    if question.kind == "task":
        scored = score_task(question, trajectory, added, status)
    else:
        scored = score_evidence(question, raw, added, status)
    if error is not None:
        scored["error"] = error
    return scored


async def _arm(trajectory: Trajectory, arm: str, model: ModelClient) -> dict[str, Any]:
    window = model.capabilities.context_window
    assert window is not None  # run_eval checked it
    metered = MeteredModel(model, window if arm == "full" else min(trajectory.window, window))
    settings = CompactionSettings(
        auto=arm == "compacted",
        summary_max_tokens=2_000,
        max_compactions_per_run=1_000,
        max_overflow_retries=0 if arm == "full" else 1,
    )
    started = time.perf_counter()
    runtime = Runtime.open(
        db="memory://",
        model=metered,
        tools=_tools(trajectory.files),
        gate=AllowAll(),
        compaction=settings,
        snapshots=None,
    )
    try:
        session_id, compactions = await _grow(runtime, trajectory, arm)
        raw = {m.id: m for m in trajectory.messages}
        scores = {
            q.id: await _ask(runtime, session_id, trajectory, q, raw) for q in trajectory.questions
        }
    finally:
        await runtime.close()
    return {
        "compactions": compactions,
        "questions": scores,
        "usage": metered.usage(),
        "latency_seconds": time.perf_counter() - started,
    }


def _sum_usage(parts: list[dict[str, Any]]) -> dict[str, Any]:
    costs = [p["cost_usd"] for p in parts]
    return {
        "calls": sum(p["calls"] for p in parts),
        "input_tokens": sum(p["input_tokens"] for p in parts),
        "output_tokens": sum(p["output_tokens"] for p in parts),
        "cost_usd": None if None in costs else sum(costs),
    }


async def run_eval(
    *, model: ModelClient | None = None, trajectories: list[str] | None = None, repeat: int = 1
) -> dict[str, Any]:
    """Every named trajectory (all by default) in both arms, ``repeat`` times, with
    ``model`` (default: the stand-in reader). The report: per arm and metric, the mean,
    variance, stdev, min and max over the repeats; each repeat's figures and every
    question's score under ``runs``."""
    if isinstance(repeat, bool) or not isinstance(repeat, int) or repeat < 1:
        raise ValidationError(f"repeat must be a positive integer, got {repeat!r}")
    chosen = load_trajectories(trajectories)
    model = model or ContextReader(chosen)
    if not model.capabilities.context_window:
        raise ConfigError(
            f"model {model.name!r} declares no context window; the full-history arm needs "
            "one (declare context_window for it in plait.toml)"
        )
    runs: list[dict[str, Any]] = []
    for _ in range(repeat):
        run: dict[str, Any] = {}
        for arm in ARMS:
            per = {t.name: await _arm(t, arm, model) for t in chosen}
            scores = [s for p in per.values() for s in p["questions"].values()]
            usage = _sum_usage([p["usage"] for p in per.values()])
            seconds = sum(p["latency_seconds"] for p in per.values())
            run[arm] = {"metrics": metrics(scores, usage, seconds), "trajectories": per}
        runs.append(run)
    return {
        "model": model.name,
        "repeat": repeat,
        "trajectories": [
            {
                "name": t.name,
                "shape": t.shape,
                "messages": len(t.messages),
                "window": t.window,
                "questions": {q.id: q.kind for q in t.questions},
            }
            for t in chosen
        ],
        "metrics": {
            arm: {name: spread([r[arm]["metrics"][name] for r in runs]) for name in METRICS}
            for arm in ARMS
        },
        "runs": runs,
    }


# --- the table ------------------------------------------------------------------------------

_LABELS = {
    "task_continuation": "task continuation",
    "constraint_violation_rate": "constraint violations",
    "evidence_accuracy": "evidence right, citation holds",
    "evidence_answered": "evidence answered (any citation)",
    "recall_calls": "recall calls (evidence re-read)",
    "model_calls": "model calls",
    "input_tokens": "input tokens",
    "output_tokens": "output tokens",
    "cost_usd": "cost (USD)",
    "latency_seconds": "latency (s)",
}
_SHARES = {
    "task_continuation",
    "constraint_violation_rate",
    "evidence_accuracy",
    "evidence_answered",
}


def _cell(name: str, figure: dict[str, Any]) -> str:
    mean, stdev = figure["mean"], figure["stdev"]
    if mean is None:
        return "n/a"
    if name in _SHARES:
        return f"{mean:.0%} ± {stdev:.0%}"
    if name in ("cost_usd", "latency_seconds"):
        return f"{mean:.4g} ± {stdev:.2g}"
    return f"{mean:,.0f} ± {stdev:,.0f}"


def report_text(report: dict[str, Any]) -> str:
    """The report as a table (mean ± standard deviation over the repeats) and one line per
    question that went wrong in some repeat."""
    lines = [
        f"model {report['model']}, {report['repeat']} repeat(s), "
        f"{len(report['trajectories'])} trajectories:"
    ]
    for trajectory in report["trajectories"]:
        lines.append(
            f"  {trajectory['name']:<12} {trajectory['messages']:>4} messages, "
            f"window {trajectory['window']:>6}: {trajectory['shape']}"
        )
    lines.append(f"{'metric':<34}{'full history':>22}{'compacted':>22}")
    for name in METRICS:
        cells = [_cell(name, report["metrics"][arm][name]) for arm in ARMS]
        lines.append(f"{_LABELS[name]:<34}{cells[0]:>22}{cells[1]:>22}")
    for number, run in enumerate(report["runs"], 1):
        for arm in ARMS:
            for name, part in run[arm]["trajectories"].items():
                for qid, score in part["questions"].items():
                    problems = [score[key] for key in ("why", "error") if score.get(key)]
                    problems += [f"violated {c}" for c in score.get("violated", ())]
                    if problems:
                        lines.append(
                            f"  repeat {number} {arm:<9} {name}/{qid}: {'; '.join(problems)}"
                        )
    return "\n".join(lines)
