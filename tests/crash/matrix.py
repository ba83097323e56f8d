"""The crash matrix: every (store, crash point) case, run for real, as table rows.

``python -m tests.crash.matrix`` (from the repository root, ``uv run``) runs every case
and both recovery races in fresh temporary directories and prints the markdown tables
used in the closing note; it exits non-zero if any case did not go as expected. The
PostgreSQL cases run on ``$PLAIT_CRASH_PG_URL``'s server if set, else on a throw-away
cluster started here.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.crash.agent_proc import APPEND_CALL, EFFECT_LINE, READ_CALL
from tests.crash.conftest import drop_case_databases
from tests.crash.harness import (
    STORES,
    Case,
    CaseResult,
    RaceResult,
    all_cases,
    observed,
    race_recovery,
    run_cases,
    snapshot_problems,
)


@dataclass(frozen=True, slots=True)
class Row:
    store: str
    order: str
    point: str
    at_crash: str
    """Durable messages / effects.txt lines / read_config runs when the process died."""
    recovery: str
    """The recovery report and the run's status after it."""
    unknown: str
    settle: str
    """What completed the run after recovery (resolve + resume, a new send) if needed."""
    messages: int
    calls_settled: str
    side_effect: int
    reads: int
    ok: bool
    problems: str = ""

    HEADER = (
        "store",
        "calls",
        "crash point",
        "at crash: msgs/effect/reads",
        "recovery",
        "unknown reported",
        "then",
        "final msgs",
        "calls settled",
        "effect applied",
        "read_config runs",
        "as expected",
    )

    def cells(self) -> tuple[str, ...]:
        verdict = "yes" if self.ok else f"**NO**: {self.problems}"
        return (
            self.store,
            self.order,
            self.point,
            self.at_crash,
            self.recovery,
            self.unknown,
            self.settle,
            str(self.messages),
            self.calls_settled,
            str(self.side_effect),
            str(self.reads),
            verdict,
        )


def _settled(final: dict[str, Any]) -> str:
    results = [m["call_id"] for m in final["messages"] if m["kind"] == "tool_result"]
    records = [e for e in final["executions"] if e["state"] == "settled"]
    once = [c for c in (READ_CALL, APPEND_CALL) if results.count(c) == 1]
    if len(records) == len(once) == 2:
        return "2/2 once"
    return f"{len(once)}/2 (records settled: {len(records)})"


def row(result: CaseResult) -> Row:
    case, exp = result.case, result.expected
    order = "read, append" if case.order == "read_first" else "append, read"
    if not result.crash.killed:
        problem = (result.crash.stderr.strip().splitlines() or ["not killed"])[-1]
        return Row(case.store, order, case.label, "-", "-", "-", "-", 0, "-", 0, 0, False, problem)
    problems: list[str] = []
    try:
        obs = observed(result)
    except AssertionError as e:
        first = str(e).splitlines()[0]
        return Row(case.store, order, case.label, "-", first, "-", "-", 0, "-", 0, 0, False, first)
    if obs != exp:
        diff = [
            f"{k}={getattr(obs, k)!r} (expected {getattr(exp, k)!r})"
            for k in exp.__dataclass_fields__
            if getattr(obs, k) != getattr(exp, k)
        ]
        problems += diff
    final = result.final
    problems += snapshot_problems(final, case.calls)
    if result.effects_final not in ([], [EFFECT_LINE]):
        problems.append(f"effects.txt {result.effects_final}")
    rec = result.recovered
    reports = rec["reports"]
    if reports and any(x["outcome"] == "resumed" for x in reports):
        recovery = f"resumed → {reports[0]['status']}"
    elif obs.run_stored:
        recovery = f"nothing stale (run {obs.status_after_recovery})"
    else:
        recovery = "no run stored"
    if case.point == "mid_line":
        recovery += " (torn line warned)" if rec["warnings"] else " (**no warning**)"
    unknown = f"yes ({obs.unknown_call})" if obs.unknown_call else "no"
    if result.settle is None:
        settle = "-"
    elif result.resolution is not None:
        status = result.settle.data["status"] if result.settle.returncode == 0 else "FAILED"
        settle = f"resolve {result.resolution} + resume → {status}"
    else:
        status = result.settle.data["status"] if result.settle.returncode == 0 else "FAILED"
        settle = f"new send → {status}"
    statuses = [r["status"] for r in final["runs"]]
    if statuses != ["completed"]:
        problems.append(f"final runs {statuses}")
    return Row(
        store=case.store,
        order=order,
        point=case.label,
        at_crash=f"{obs.durable_messages}/{obs.effects_at_crash}/{obs.reads_at_crash}",
        recovery=recovery,
        unknown=unknown,
        settle=settle,
        messages=len(final["messages"]),
        calls_settled=_settled(final),
        side_effect=len(result.effects_final),
        reads=len(result.reads_final),
        ok=not problems,
        problems="; ".join(problems),
    )


def race_row(race: RaceResult, hold: bool) -> tuple[str, ...]:
    outcomes = []
    for p in race.recoverers:
        if p.returncode != 0:
            outcomes.append(f"exit {p.returncode}")
            continue
        reports = p.data["reports"]
        outcomes.append(", ".join(f"{x['outcome']} ({x['detail']})" for x in reports) or "none")
    ok = (
        sorted(o.split(" ")[0] for o in outcomes) == ["resumed", "skipped"]
        and race.effects == [EFFECT_LINE]
        and len(race.reads) == 1
        and not snapshot_problems(race.final, race.case.calls)
    )
    return (
        race.case.store,
        "winner held after its first tool" if hold else "free race",
        outcomes[0],
        outcomes[1],
        str(len(race.effects)),
        str(len(race.reads)),
        race.final["runs"][0]["status"],
        "yes" if ok else "**NO**",
    )


def markdown(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(c.replace("|", "\\|") for c in r) + " |" for r in rows]
    return "\n".join(lines)


def run_matrix(root: Path, cases: list[Case] | None = None) -> list[Row]:
    futures = run_cases(cases or all_cases(), root)
    return [row(f.result()) for f in futures.values()]


@contextlib.contextmanager
def _pg_server() -> Iterator[None]:
    """Where the PostgreSQL cases create their databases (see ``agent_proc.store_url``)."""
    prefix = f"plait_crash_{secrets.token_hex(3)}"
    os.environ["PLAIT_CRASH_PG_PREFIX"] = prefix
    given = os.environ.get("PLAIT_CRASH_PG_URL")
    if given:
        try:
            yield
        finally:
            drop_case_databases(given, prefix)
        return
    from plait.testing.postgres import temporary_cluster

    with temporary_cluster() as url:
        os.environ["PLAIT_CRASH_PG_URL"] = url
        yield


def main() -> int:
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="plait-crash-") as tmp, _pg_server():
        rows = run_matrix(Path(tmp) / "cases")
        races = [
            race_row(race_recovery(store, Path(tmp) / "races", hold=hold), hold)
            for store in STORES
            for hold in (True, False)
        ]
    print("### Crash points × stores\n")
    print("`at crash`: messages durable / lines in effects.txt / read_config executions.\n")
    print(markdown(Row.HEADER, [r.cells() for r in rows]))
    print("\n### Two processes recovering the same run\n")
    header = ("store", "mode", "recoverer a", "recoverer b", "effect applied", "reads", "run")
    print(markdown((*header, "as expected"), races))
    bad = [r for r in rows if not r.ok] + [r for r in races if r[-1] != "yes"]
    print(f"\n{len(rows)} cases, {len(races)} races, {len(bad)} not as expected; ", end="")
    print(f"{time.monotonic() - started:.1f} s")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
