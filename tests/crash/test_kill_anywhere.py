"""A run killed with SIGKILL at an arbitrary moment, on the path production takes (no
crash hook, so a tool result rides with the next step's commit): recovery and a person's
resolution bring it to its end with the history whole and no side effect repeated.

The crash matrix (``test_crash_recovery``) kills at every persistence point with commits
kept apart; this kills wherever the run happens to be once it has applied some side
effects, several times over a long run, on SQLite, JSONL and PostgreSQL."""

from __future__ import annotations

import asyncio
import random
import subprocess
import sys
import time
import warnings
from collections import Counter
from pathlib import Path

import pytest

from plait.adapters.stores import StoreWarning, open_store
from plait.domain.messages import AssistantMessage, ToolResultMessage, ToolStatus
from plait.domain.runs import RunStatus
from plait.domain.session import StoredMessage
from tests.crash import busy_proc
from tests.pg import empty_database

STEPS = 300
"""150 side effects and 150 reads, then the answer."""
ROOT = Path(__file__).resolve().parents[2]


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def _kill_after(case: Path, url: str, effects: int, jitter: float) -> None:
    """Start the run in a process and kill it once ``effects`` lines were appended (plus
    ``jitter`` seconds, so the moment falls anywhere in a step)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.crash.busy_proc", url, str(case), str(STEPS)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    path = case / "workspace" / "effects.txt"
    deadline = time.monotonic() + 60
    while len(_lines(path)) < effects:
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            _, err = proc.communicate()
            pytest.fail(f"no {effects} effects before the run ended or 60 s passed: {err!r}")
        time.sleep(0.0005)
    time.sleep(jitter)
    proc.kill()
    proc.communicate()
    assert proc.returncode == -9


async def _recover_to_the_end(case: Path, url: str) -> tuple[RunStatus, list[StoredMessage], int]:
    """Recover the run; if a side effect's outcome is unknown, resolve it the way a
    person would (by looking at effects.txt) and resume. The final status, the history
    and the number of unknown outcomes."""
    store = open_store(url)
    agent = busy_proc.service(store, case, STEPS)
    sid = (case / "session_id").read_text()
    [run] = await store.list_runs(session_id=sid)
    [report] = await agent.recover(run_id=run.id, force=True)
    assert report.result is not None, report
    status = report.result.run.status
    unknown = 0
    if status is RunStatus.AWAITING_RESOLUTION:
        [record] = [
            r for r in await store.get_executions(run.id) if r.result_status is ToolStatus.UNKNOWN
        ]
        assert record.tool_name == "append_line"
        unknown = 1
        happened = f"line-{record.call_id[1:]}" in _lines(case / "workspace" / "effects.txt")
        verdict = "succeeded" if happened else "failed"
        await agent.resolve(run.id, record.call_id, verdict, "checked effects.txt")
        status = (await agent.resume(run.id)).run.status
    history = [sm for sm in await store.read_messages(sid)]
    await store.close()
    return status, history, unknown


def _url(kind: str, case: Path, request: pytest.FixtureRequest) -> str:
    if kind == "sqlite":
        return f"sqlite:///{case / 'store.db'}"
    if kind == "jsonl":
        return f"jsonl:///{case / 'store'}"
    url: str = request.getfixturevalue("pg_url")
    empty_database(url)
    return url


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["sqlite", "jsonl", "postgres"])
@pytest.mark.parametrize("effects", [1, 40, 110])
def test_a_run_killed_anywhere_ends_whole_with_no_effect_repeated(
    kind: str, effects: int, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    case = tmp_path
    (case / "workspace").mkdir()
    (case / "workspace" / "config.toml").write_text("version = 2\n")
    url = _url(kind, case, request)
    _kill_after(case, url, effects, random.Random(effects).uniform(0, 0.003))
    at_kill = len(_lines(case / "workspace" / "effects.txt"))
    assert at_kill < STEPS // 2, "killed too late: the run had finished its effects"

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", StoreWarning)
        status, history, unknown = asyncio.run(_recover_to_the_end(case, url))
    # A SIGKILL can stop a write to a regular file at a page boundary (the kernel checks
    # for a fatal signal between pages), leaving the JSONL store a torn last line: a
    # commit never acknowledged, which the store discards with a warning. Nothing else.
    assert all(
        issubclass(w.category, StoreWarning) and "torn last line" in str(w.message) for w in caught
    ), [str(w.message) for w in caught]
    assert kind == "jsonl" or not caught
    assert status is RunStatus.COMPLETED
    assert [sm.seq for sm in history] == list(range(1, len(history) + 1))
    messages = [sm.message for sm in history]
    asked = Counter(c.id for m in messages if isinstance(m, AssistantMessage) for c in m.tool_calls)
    results = {m.result.call_id: m.result for m in messages if isinstance(m, ToolResultMessage)}
    answered = Counter(m.result.call_id for m in messages if isinstance(m, ToolResultMessage))
    calls = {f"c{k}" for k in range(1, STEPS + 1)}
    assert set(asked) == calls and set(asked.values()) == {1}  # every turn once
    assert set(answered) == calls and set(answered.values()) == {1}  # one result per call
    assert isinstance(messages[-1], AssistantMessage) and messages[-1].text == "done"

    lines = Counter(_lines(case / "workspace" / "effects.txt"))
    assert set(lines.values()) == {1}, "a side effect was applied twice"
    for k in range(1, STEPS + 1, 2):
        applied = f"line-{k}" in lines
        assert applied == (results[f"c{k}"].status is ToolStatus.SUCCEEDED), k
    assert unknown <= 1
    reads = Counter(line.split()[1] for line in _lines(case / "reads.log"))
    assert set(reads) == {f"c{k}" for k in range(2, STEPS + 1, 2)}
    assert sum(reads.values()) - len(reads) <= 1  # at most the read in flight ran again
