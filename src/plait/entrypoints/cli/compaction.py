"""``plait compact``, ``plait context`` and the summaries shown by ``plait history``."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from plait.adapters.shapes import (
    constraint_json,
    context_item_source,
    iso,
    outcome_json,
    summary_json,
    view_json,
)
from plait.domain.errors import ConfigError
from plait.entrypoints.cli import _loop
from plait.entrypoints.cli._remembered import remember_model

if TYPE_CHECKING:
    from plait.application.compaction import CompactionService, ContextView
    from plait.application.queries import Queries
    from plait.domain.summary import Summary
    from plait.runtime import Runtime

__all__ = ["COMMANDS", "history_summaries", "register"]

EXIT_OK, EXIT_NOT_DONE = 0, 1


class _Output(Protocol):
    json: bool

    def emit(self, data: Any, text: str | Callable[[], str]) -> None: ...


def register(
    sub: Any,
    common: Callable[[argparse.ArgumentParser], None],
    model_opt: Callable[[argparse.ArgumentParser], None],
) -> None:
    compact = sub.add_parser(
        "compact",
        help="summarize a session's older history now (raw history is kept)",
    )
    compact.add_argument("session_id", metavar="SESSION")
    model_opt(compact)
    common(compact)
    context = sub.add_parser(
        "context", help="show what the next model call would see, with its token breakdown"
    )
    context.add_argument("session_id", metavar="SESSION")
    context.add_argument(
        "--items", action="store_true", help="list every item sent, with source and trust"
    )
    model_opt(context)
    common(context)
    ev = sub.add_parser("eval", help="run an evaluation and print its report")
    esub = ev.add_subparsers(dest="eval_command", required=True, metavar="EVAL")
    comp = esub.add_parser(
        "compaction",
        help="a fixed set of long sessions of different shapes, each answered with full history "
        "and with compaction: task continuation, constraint violations, evidence accuracy with "
        "citations checked, cost and latency, over N repeats",
    )
    comp.add_argument(
        "--trajectory",
        action="append",
        default=None,
        metavar="NAME",
        help="run only this trajectory (repeatable; default: all of them)",
    )
    comp.add_argument(
        "--repeat", type=int, default=3, metavar="N", help="repeats, for the variance (default 3)"
    )
    comp.add_argument(
        "--model",
        default=None,
        help="a real model spec to summarize and answer (default: a deterministic stand-in "
        "reader that answers only from what it is shown; no network)",
    )
    common(comp)


# --- text -----------------------------------------------------------------------------------


def summary_text(summary: Summary) -> str:
    body = summary.body
    lines = [
        f"summary {summary.id} (generation {summary.generation}): replaces messages "
        f"1..{summary.covered_through_seq}"
        f" in the context ({summary.source_tokens} -> {summary.summary_tokens} tokens, "
        f"{summary.trigger}, model "
        f"{summary.model or '?'}, template {summary.template_version or '?'}, "
        f"{iso(summary.created_at)})",
        f"  goal: {body.goal}",
    ]
    lines += [f"  decision: {n.text} [{', '.join(n.source_ids)}]" for n in body.decisions]
    lines += [
        f"  open: {q.text} (uncertain: {q.uncertainty}) [{', '.join(q.source_ids)}]"
        for q in body.open_questions
    ]
    lines += [f"  evidence: {e.message_id} {e.note}" for e in body.evidence]
    facts = summary.facts
    lines.append(
        f"  facts: {len(facts.files)} file(s), {len(facts.commands)} command(s), "
        f"{len(facts.failing_tests)} failing test(s), {len(facts.constraints)} constraint(s)"
    )
    return "\n".join(lines)


async def history_summaries(queries: Queries, session_id: str) -> tuple[dict[str, Any], list[str]]:
    """What ``plait history`` adds: every activated summary and the constraint records
    (JSON fields, text lines). Stores without summary support add nothing (the queries
    find none there)."""
    summaries = await queries.list_summaries(session_id)
    constraints = await queries.list_constraints(session_id)
    if not summaries and not constraints:
        return {}, []
    data = {
        "summaries": [summary_json(s) for s in summaries],
        "constraints": [constraint_json(c) for c in constraints],
    }
    lines = [summary_text(s) for s in summaries]
    if summaries:
        lines[-1] += "\n  (active)"
    lines += [f"constraint: {c.text} [{c.source_message_id}]" for c in constraints]
    return data, lines


def view_text(view: ContextView, *, items: bool) -> str:
    tokens, budget = view.tokens, view.budget
    meter = f"{view.meter}, {'exact' if view.exact else 'estimate'}"
    lines = [
        f"model {view.model} (meter {meter}): window {budget.window}, reserved output "
        f"{budget.reserved_output}, safety margin {budget.safety_margin}, input budget "
        f"{budget.input_budget}, "
        f"compaction at {view.threshold_tokens}",
        f"  instructions            {tokens.instructions:>8}",
        f"  tool definitions        {tokens.tools:>8}",
        f"  constraints + summary   {tokens.preamble:>8}",
        f"  pinned request          {tokens.pinned:>8}",
        f"  recent history          {tokens.tail:>8}  (messages {view.tail_from_seq}.."
        f"{view.history_messages})",
        f"  total                   {tokens.total:>8}  (raw history alone: "
        f"{view.full_history_tokens})",
    ]
    if view.calibration != 1.0:
        lines.append(
            f"  corrected by usage      {view.corrected_total:>8}  (x{view.calibration:.2f}: the "
            "provider reported more input tokens than the meter counted)"
        )
    if view.over_budget:
        lines.append("  over the input budget: the next call would not fit")
    elif view.over_threshold:
        lines.append("  over the compaction threshold: the next step compacts")
    if view.summary is not None:
        lines.append(summary_text(view.summary))
    lines += [f"constraint: {c.text} [{c.source_message_id}]" for c in view.constraints]
    if items:
        for item in view.context.items:
            source, trust = context_item_source(item)
            lines.append(f"  item {item.id}: {item.kind}, from {source}, trust {trust}")
    return "\n".join(lines)


# --- commands -------------------------------------------------------------------------------


def _open(args: argparse.Namespace) -> tuple[Runtime, CompactionService, str]:
    # lazy: plait.runtime loads the application layer (~50 ms); --help does not need it
    from plait.runtime import Runtime

    remember_model(args, session_id=args.session_id)
    runtime = Runtime.open(db=getattr(args, "db", None), model=args.model, create=False)
    compaction, model = runtime.compaction, runtime.model
    if model is None or compaction is None:
        _loop.run(runtime.close())
        raise ConfigError(
            "no model chosen: the session remembers none (it has no run yet); pass --model "
            "or set PLAIT_MODEL; its context window decides the budget (plait never guesses "
            "a window)"
            if model is None
            else "this store does not support compaction"
        )
    return runtime, compaction, model.name


def _compact(args: argparse.Namespace, out: _Output) -> int:
    runtime, compaction, model = _open(args)

    async def go() -> int:
        try:
            outcome = await compaction.compact(
                args.session_id,
                trigger="manual",
                model=model,
                instructions=runtime.instructions,
                tools=tuple(t.spec for t in runtime.tools),
            )
        finally:
            await runtime.close()
        text = f"{outcome.status}: {outcome.detail}"
        if outcome.summary is not None:
            text += "\n" + summary_text(outcome.summary)
        out.emit(outcome_json(outcome), text)
        return EXIT_OK if outcome.status in ("compacted", "nothing_to_compact") else EXIT_NOT_DONE

    return _loop.run(go())


def _context(args: argparse.Namespace, out: _Output) -> int:
    runtime, compaction, model = _open(args)

    async def go() -> int:
        try:
            stored = await runtime.queries.history(args.session_id)
            view = await compaction.view(
                args.session_id,
                [sm.message for sm in stored],
                model=model,
                instructions=runtime.instructions,
                tools=tuple(t.spec for t in runtime.tools),
            )
        finally:
            await runtime.close()
        out.emit(view_json(view, items=args.items), view_text(view, items=args.items))
        return EXIT_OK

    return _loop.run(go())


def _eval(args: argparse.Namespace, out: _Output) -> int:
    # lazy: the evaluation harness and the runtime load the whole stack; only eval needs them
    from plait.eval.compaction import report_text, run_eval, tool_specs
    from plait.runtime import open_model

    if args.repeat < 1:
        raise ConfigError(f"--repeat must be at least 1, got {args.repeat}")
    model = open_model(args.model, tools=tool_specs()) if args.model else None
    report = _loop.run(run_eval(model=model, trajectories=args.trajectory, repeat=args.repeat))
    out.emit(report, lambda: report_text(report))
    return EXIT_OK


COMMANDS: dict[tuple[str, ...], Callable[[argparse.Namespace, Any], int]] = {
    ("compact",): _compact,
    ("context",): _context,
    ("eval", "compaction"): _eval,
}
