"""Crash recovery with real processes (issue 3, DESIGN §3–§4).

Each case starts the agent in a subprocess, kills it with SIGKILL at one persistence point
(through the service's test-only ``checkpoint`` hook, or the JSONL store's ``mid_line``
hook), recovers in a second process, and settles (resolve + resume) in a third when a
side effect's outcome is unknown. The cases run in parallel threads, each in its own
directory, started once for the whole session; each test waits for its own case.

What must hold comes from :func:`tests.crash.harness.expected` (derived from the order of
the persistence points alone) plus whole-history invariants checked here.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest

from tests.crash.agent_proc import (
    APPEND_CALL,
    CONFIG_TEXT,
    EFFECT_LINE,
    FINAL_TEXT,
    READ_CALL,
    USER_TEXT,
)
from tests.crash.harness import (
    STORES,
    Case,
    CaseResult,
    Proc,
    agent_cmd,
    all_cases,
    crash_args,
    observed,
    race_recovery,
    read_lines,
    run_cases,
    run_proc,
    snapshot_problems,
)

pytestmark = pytest.mark.slow

CASES = all_cases()


@pytest.fixture(scope="session")
def crash_runs(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[Case, Future[CaseResult]]]:
    """Start every selected case at once (threads; each case its own directory)."""
    selected = [
        item.callspec.params["case"]
        for item in request.session.items
        if hasattr(item, "callspec") and isinstance(item.callspec.params.get("case"), Case)
    ]
    cases = selected or CASES
    if any(case.store == "postgres" for case in cases):
        request.getfixturevalue("crash_pg")
    futures = run_cases(cases, tmp_path_factory.mktemp("crash"))
    yield futures
    for future in futures.values():  # a session stopped early (-x) starts no more cases
        future.cancel()


def _server_for(store: str, request: pytest.FixtureRequest) -> None:
    """PostgreSQL cases need the server their processes create their databases on."""
    if store == "postgres":
        request.getfixturevalue("crash_pg")


def _clean(proc: Proc, what: str) -> dict[str, Any]:
    """The process exited normally and wrote nothing to stderr (no traceback, no log)."""
    assert proc.returncode == 0, f"{what} failed: {proc.describe()}"
    assert proc.stderr == "", f"{what} wrote to stderr: {proc.describe()}"
    return proc.data


def _by_call(snap: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    results: dict[str, list[dict[str, Any]]] = {}
    for m in snap["messages"]:
        if m["kind"] == "tool_result":
            results.setdefault(m["call_id"], []).append(m)
    return results


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_crash_then_recover(case: Case, crash_runs: dict[Case, Future[CaseResult]]) -> None:
    r = crash_runs[case].result(timeout=300)
    exp = r.expected

    # 1. The process died where it was told to, by SIGKILL, and nowhere else.
    assert r.crash.killed, f"the agent was not killed: {r.crash.describe()}"
    assert r.crash.stderr == ""
    assert r.crash_info is not None
    if case.point == "mid_line":
        assert r.crash_info["point"] == "mid_line"
        assert r.crash_info["after"] == f"{case.after}#{case.nth}"
        assert r.crash_info["torn"], "the hook fired with no session line half written"
    else:
        assert (r.crash_info["point"], r.crash_info["nth"]) == (case.point, case.nth)

    # 2. The recovering process ran cleanly; only a torn line gives it a warning.
    rec = _clean(r.recover, "recovery")
    torn_warnings = [w for w in rec["warnings"] if w.startswith("StoreWarning") and "torn" in w]
    if case.point == "mid_line":
        assert len(torn_warnings) == 1, rec["warnings"]
        assert rec["warnings"] == torn_warnings
    else:
        assert rec["warnings"] == []

    # 3. Everything observed matches what the persistence order allows (the whole table
    #    row at once: durable state at the crash, what recovery did, the final counts).
    assert observed(r) == exp

    before, after = rec["before"], rec["after"]
    # 4. What was durable at the crash is exactly the history up to the last complete
    #    write, and recovery only appends to it: no message lost, none rewritten.
    assert len(before["messages"]) == exp.durable_messages
    assert after["messages"][: len(before["messages"])] == before["messages"]
    assert snapshot_problems(before, case.calls, complete=False) == []
    assert snapshot_problems(after, case.calls, complete=False) == []

    # 5. The recovery report names the run when there was one to take over.
    reports = rec["reports"]
    run_ids = {run["id"] for run in before["runs"]}
    if exp.resumed:
        assert [(x["run_id"], x["outcome"]) for x in reports] == [(next(iter(run_ids)), "resumed")]
        assert reports[0]["status"] == exp.status_after_recovery
    else:  # a completed run, or a run whose first line never landed: nothing is stale
        assert [x for x in reports if x["outcome"] == "resumed"] == []

    # 6. Unknown is reported exactly when the side effect was recorded as started and its
    #    result was never saved: record unknown, run awaiting resolution, no result yet.
    executions = {e["call_id"]: e for e in after["executions"]}
    if exp.unknown_call is not None:
        record = executions[APPEND_CALL]
        assert (record["state"], record["result_status"]) == ("started", "unknown")
        assert "unknown" in (record["note"] or "")
        assert after["runs"][0]["status"] == "awaiting_resolution"
        assert after["runs"][0]["error"] == "unknown_effect"
        assert APPEND_CALL not in _by_call(after)
        assert after["active_run_id"] == after["runs"][0]["id"]  # the session stays claimed
    else:
        assert all(e["result_status"] != "unknown" for e in after["executions"])

    # 7. The side effect applied at most once: exactly once if it ran before the crash or
    #    after recovery, never when the crash came before it could act.
    assert r.effects_final in ([], [EFFECT_LINE])
    assert len(r.effects_final) == exp.effects_final

    # 8. The read-only tool ran again exactly when its result had not been saved.
    ran_before_crash = bool(r.reads_at_crash)
    saved_before_crash = any(m.get("call_id") == READ_CALL for m in before["messages"])
    rerun = len(r.reads_final) == 2
    assert rerun == (ran_before_crash and not saved_before_crash)
    assert len(r.reads_final) in (1, 2)

    # 9. Settling: resolve + resume in a third process (or, when the run never reached
    #    the store, a new send on the same session) completes the run.
    if exp.unknown_call is not None or not exp.run_stored:
        assert r.settle is not None
        settled = _clean(r.settle, "resolve/resume" if exp.run_stored else "new send")
        assert settled["status"] == "completed"
        if exp.run_stored:
            assert settled["warnings"] == []
            assert r.resolution == exp.resolution
            resolved = _by_call(settled["after"])[APPEND_CALL][0]
            assert resolved["status"] == exp.resolution
            assert "outcome verified by" in resolved["content"]
        else:  # the torn start line is discarded (with a warning) before the new write
            assert len(settled["warnings"]) == 1 and "torn" in settled["warnings"][0]
    else:
        assert r.settle is None

    # 10. The final history: seq 1..n, unique ids, the user message first, both calls
    #     settled exactly once (one result message, one settled record), run completed.
    final = r.final
    assert snapshot_problems(final, case.calls) == []
    assert final["messages"][0]["kind"] == "user"
    assert final["messages"][0]["text"] == USER_TEXT
    if exp.run_stored:
        assert final["messages"][0]["id"] == before["messages"][0]["id"]
    assert final["messages"][-1]["text"] == FINAL_TEXT
    assert [run["status"] for run in final["runs"]] == ["completed"]
    assert final["active_run_id"] is None
    results = _by_call(final)
    assert {c: len(ms) for c, ms in results.items()} == {READ_CALL: 1, APPEND_CALL: 1}
    assert results[READ_CALL][0]["content"] == CONFIG_TEXT
    records = final["executions"]
    assert sorted(e["call_id"] for e in records) == sorted(case.calls)
    for e in records:
        assert e["state"] == "settled"
        assert e["result_status"] == results[e["call_id"]][0]["status"]
    if exp.resolution is None:
        assert results[APPEND_CALL][0]["status"] == "succeeded"

    # 11. JSONL: the torn line is gone once someone wrote; every line is complete JSON.
    if case.store == "jsonl":
        assert r.torn_files == []


@pytest.mark.parametrize("hold", [True, False], ids=["lease-held", "free-race"])
@pytest.mark.parametrize("store", STORES)
def test_two_recoverers_exactly_one_wins(
    store: str, hold: bool, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """After a crash with both calls requested, two processes released together recover
    the same run: one resumes it, the other is skipped, and nothing runs twice.

    ``lease-held`` stops the winner (lease held) after its first tool until the loser has
    exited, so the loser certainly tries while the lease is taken."""
    _server_for(store, request)
    r = race_recovery(store, tmp_path, hold=hold)
    assert r.crash.killed, r.crash.describe()
    outputs = [_clean(p, f"recoverer {n}") for n, p in zip("ab", r.recoverers, strict=True)]
    run_id = r.final["runs"][0]["id"]
    outcomes = []
    for out in outputs:
        assert [x["run_id"] for x in out["reports"]] == [run_id]
        outcomes.append(out["reports"][0]["outcome"])
    assert sorted(outcomes) == ["resumed", "skipped"]
    winner = outcomes.index("resumed")
    loser = 1 - winner
    assert outputs[winner]["reports"][0]["status"] == "completed"
    if hold:
        assert r.first_to_exit == loser
        detail = outputs[loser]["reports"][0]["detail"]
        assert f"leased to 'recoverer-{'ab'[winner]}'" in detail
    # Exactly one process executed the calls; the side effect applied once.
    assert r.effects == [EFFECT_LINE]
    assert r.reads_at_crash == []
    assert len(r.reads) == 1 and r.reads[0].split()[1] == f"recover-recoverer-{'ab'[winner]}"
    assert snapshot_problems(r.final, r.case.calls) == []
    assert [run["status"] for run in r.final["runs"]] == ["completed"]
    assert all(e["state"] == "settled" for e in r.final["executions"])


def _final_checks(snap: dict[str, Any], calls: tuple[str, str]) -> None:
    assert snapshot_problems(snap, calls) == []
    assert [run["status"] for run in snap["runs"]] == ["completed"]
    assert all(e["state"] == "settled" for e in snap["executions"])
    assert snap["active_run_id"] is None


@pytest.mark.parametrize("store", STORES)
def test_a_crash_during_recovery_is_recovered_again(
    store: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """The recovering process dies too, after the side effect it ran (never started
    before) acted and before its result was saved: the next recovery reports it unknown
    and does not run it again; the read-only result saved by the first recovery stays."""
    _server_for(store, request)
    case = Case(store, "assistant_saved")
    case_dir = tmp_path / "case"
    effects, reads = case_dir / "workspace" / "effects.txt", case_dir / "reads.log"
    crash = run_proc(agent_cmd("run", case, case_dir, *crash_args(case)))
    assert crash.killed, crash.describe()
    again = run_proc(
        agent_cmd("recover", case, case_dir, "--crash-at", "tool_returned", "--nth", "2")
    )
    assert again.killed, again.describe()
    info = json.loads((case_dir / "crash.json").read_text())
    assert (info["command"], info["point"], info["nth"]) == ("recover", "tool_returned", 2)
    assert read_lines(effects) == [EFFECT_LINE]

    rec = _clean(run_proc(agent_cmd("recover", case, case_dir)), "second recovery")
    assert [(x["outcome"], x["status"]) for x in rec["reports"]] == [
        ("resumed", "awaiting_resolution")
    ]
    unknown = [e["call_id"] for e in rec["after"]["executions"] if e["result_status"] == "unknown"]
    assert unknown == [APPEND_CALL]
    assert list(_by_call(rec["after"])) == [READ_CALL]
    assert read_lines(effects) == [EFFECT_LINE]
    assert len(read_lines(reads)) == 1  # its result was saved by the first recovery

    note = ["--note", "effects.txt has the line"]
    resolve = ["--call", APPEND_CALL, "--status", "succeeded", *note]
    settled = _clean(run_proc(agent_cmd("resolve", case, case_dir, *resolve)), "resolve")
    _final_checks(settled["after"], case.calls)
    assert read_lines(effects) == [EFFECT_LINE]
    assert len(read_lines(reads)) == 1


@pytest.mark.parametrize("store", STORES)
def test_a_crash_during_resume_is_recovered(
    store: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """Resolve the unknown side effect, then resume dies right after saving the read-only
    result that was still pending: recovery must take the run over and finish it."""
    _server_for(store, request)
    case = Case(store, "execution_started", order="append_first")
    case_dir = tmp_path / "case"
    reads = case_dir / "reads.log"
    crash = run_proc(agent_cmd("run", case, case_dir, *crash_args(case)))
    assert crash.killed, crash.describe()
    rec = _clean(run_proc(agent_cmd("recover", case, case_dir)), "recovery")
    assert [x["status"] for x in rec["reports"]] == ["awaiting_resolution"]

    resolve = ["--call", APPEND_CALL, "--status", "failed", "--note", "effects.txt lacks it"]
    dies = run_proc(agent_cmd("resolve", case, case_dir, *resolve, "--crash-at", "result_saved"))
    assert dies.killed, dies.describe()
    assert len(read_lines(reads)) == 1

    rec = _clean(run_proc(agent_cmd("recover", case, case_dir)), "recovery after resume")
    assert [(x["outcome"], x["status"]) for x in rec["reports"]] == [("resumed", "completed")]
    _final_checks(rec["after"], case.calls)
    assert len(read_lines(reads)) == 1
    assert read_lines(case_dir / "workspace" / "effects.txt") == []
