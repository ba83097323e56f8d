"""Drives the crash cases: kill the agent at a point, recover in a new process, settle.

A :class:`Case` names a store and a crash point. :func:`expected` says, from the order of
persistence points alone (DESIGN §3), what must be durable at the crash and what recovery
must do; :func:`run_case` does it with real processes (``tests.crash.agent_proc``) in a
fresh directory and returns everything observed as a :class:`CaseResult`.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import plait
from tests.crash.agent_proc import APPEND_CALL, EFFECT_LINE, READ_CALL

STORES = ("sqlite", "jsonl", "postgres")
REPO = Path(__file__).resolve().parents[2]
PROC_TIMEOUT = 60.0


# --- cases ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Case:
    store: str
    point: str
    """A loop checkpoint, or ``mid_line`` (JSONL only: a torn session line)."""
    nth: int = 1
    order: str = "read_first"
    """Which call the first assistant turn asks for first."""
    after: str | None = None
    """For ``mid_line``: the line torn is the first session line written after the
    ``nth`` occurrence of this point."""

    @property
    def calls(self) -> tuple[str, str]:
        if self.order == "read_first":
            return (READ_CALL, APPEND_CALL)
        return (APPEND_CALL, READ_CALL)

    @property
    def anchor(self) -> tuple[str, int]:
        """The last persistence point reached: what is durable is what it left."""
        return (self.after or "", self.nth) if self.point == "mid_line" else (self.point, self.nth)

    @property
    def id(self) -> str:
        point, nth = self.anchor
        where = f"mid_line-after-{point}" if self.point == "mid_line" else point
        return f"{self.store}-{where}-{nth}-{self.order}"  # no '#' or '?': used in store URLs

    @property
    def label(self) -> str:
        """The crash point in words, for the table."""
        events = _events(self)
        upto = _durable_upto(self, events)
        point, nth = self.anchor
        if self.point != "mid_line":
            return f"`{point}` #{nth}: {_describe(events[upto])}"
        torn = events[upto + 1]
        return f"mid-line: {_noun(torn)} line torn (after `{point}` #{nth})"


def all_cases() -> list[Case]:
    """Every persistence point for every store and both call orders, plus torn JSONL
    lines after each kind of write."""
    cases: list[Case] = []
    for store in STORES:
        cases += [
            Case(store, "user_saved"),
            Case(store, "assistant_saved"),
            Case(store, "tool_returned", 1),
            Case(store, "result_saved", 1),
            Case(store, "execution_started"),
            Case(store, "tool_returned", 2),
            Case(store, "result_saved", 2),
            Case(store, "assistant_saved", 2),
            Case(store, "execution_started", order="append_first"),
            Case(store, "tool_returned", 1, order="append_first"),
            Case(store, "result_saved", 1, order="append_first"),
            Case(store, "tool_returned", 2, order="append_first"),
        ]
    cases += [
        Case("jsonl", "mid_line", 1, after="session_created"),
        Case("jsonl", "mid_line", 1, after="user_saved"),
        Case("jsonl", "mid_line", 1, after="tool_returned"),
        Case("jsonl", "mid_line", 2, after="tool_returned"),
        Case("jsonl", "mid_line", 1, after="assistant_saved", order="append_first"),
        Case("jsonl", "mid_line", 2, after="result_saved"),
    ]
    return cases


# --- what must happen -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Expected:
    run_stored: bool
    """The run (and its user message) reached the store before the crash."""
    durable_messages: int
    effects_at_crash: int
    reads_at_crash: int
    read_result_saved: bool
    resumed: bool
    """Recovery reports ``resumed`` for the run (False: nothing to recover)."""
    status_after_recovery: str | None
    unknown_call: str | None
    """The side effect settled as ``unknown`` by recovery, if any."""
    messages_after_recovery: int
    effects_after_recovery: int
    reads_after_recovery: int
    resolution: str | None
    """What a person verifying effects.txt records for the unknown call."""
    effects_final: int
    reads_final: int


def _events(case: Case) -> list[tuple[str, int, str, str | None]]:
    """The persistence points of one uninterrupted run: (point, nth, what, call)."""
    events: list[tuple[str, int, str, str | None]] = [
        ("session_created", 1, "", None),
        ("user_saved", 1, "user", None),
        ("assistant_saved", 1, "assistant", None),
    ]
    for k, call in enumerate(case.calls, 1):
        if call == APPEND_CALL:
            events.append(("execution_started", 1, "started", call))
        events.append(("tool_returned", k, "ran", call))
        events.append(("result_saved", k, "saved", call))
    events.append(("assistant_saved", 2, "final", None))
    return events


_LINES = ("user", "assistant", "started", "saved", "final")
"""Events that write a line (a commit); ``ran`` is a tool's effect, not a write."""
_TOOL = {READ_CALL: "read_config", APPEND_CALL: "append_line"}


def _describe(event: tuple[str, int, str, str | None]) -> str:
    """What had happened when an event was reached."""
    what, call = event[2], _TOOL.get(event[3] or "", "")
    return {
        "": "session created, no message yet",
        "user": "user message saved",
        "assistant": "assistant message with both calls saved",
        "started": f"{call} recorded as started",
        "ran": f"{call} ran, result not saved",
        "saved": f"{call} result saved",
        "final": "final answer saved, run completed",
    }[what]


def _noun(event: tuple[str, int, str, str | None]) -> str:
    """What the line an event writes holds."""
    what, call = event[2], _TOOL.get(event[3] or "", "")
    return {
        "user": "user message",
        "assistant": "assistant message",
        "started": f"{call} started record",
        "saved": f"{call} result",
        "final": "final answer",
    }[what]


def _durable_upto(case: Case, events: list[tuple[str, int, str, str | None]]) -> int:
    """Index of the last event that happened before the crash. A torn line is the next
    line after the anchor; a tool that ran before that line was written did act."""
    point, nth = case.anchor
    upto = next(i for i, e in enumerate(events) if e[:2] == (point, nth))
    if case.point == "mid_line":
        while upto + 1 < len(events) and events[upto + 1][2] not in _LINES:
            upto += 1
    return upto


def expected(case: Case) -> Expected:
    """What must happen in ``case``, derived from the persistence order alone."""
    events = _events(case)
    upto = _durable_upto(case, events)
    done = {(what, call) for _, _, what, call in events[: upto + 1]}
    user, assistant = ("user", None) in done, ("assistant", None) in done
    final = ("final", None) in done
    ran = {c for w, c in done if w == "ran"}
    saved = {c for w, c in done if w == "saved"}
    started = {c for w, c in done if w == "started"}
    durable = int(user) + int(assistant) + len(saved) + int(final)
    effects = int(APPEND_CALL in ran)
    reads = int(READ_CALL in ran)
    at_crash = Expected(
        run_stored=user,
        durable_messages=durable,
        effects_at_crash=effects,
        reads_at_crash=reads,
        read_result_saved=READ_CALL in saved,
        resumed=False,
        status_after_recovery=None,
        unknown_call=None,
        messages_after_recovery=durable,
        effects_after_recovery=effects,
        reads_after_recovery=reads,
        resolution=None,
        effects_final=effects,
        reads_final=reads,
    )
    if not user:  # nothing of the run is stored; a new send then runs normally
        return replace(at_crash, effects_final=1, reads_final=1)
    if final:  # the run completed: nothing to recover
        return replace(at_crash, status_after_recovery="completed")
    # Recovery: ask the model again if its answer was not saved, then run the calls that
    # have no result, in order, until a started side effect (unknown: wait for a person).
    msgs = durable if assistant else durable + 1
    remaining = [c for c in case.calls if c not in saved]
    unknown = None
    while remaining:
        call = remaining[0]
        if call == APPEND_CALL and call in started:
            unknown = call
            break
        remaining.pop(0)
        reads += call == READ_CALL
        effects += call == APPEND_CALL
        msgs += 1
    recovered = replace(
        at_crash,
        resumed=True,
        messages_after_recovery=msgs,
        effects_after_recovery=effects,
        reads_after_recovery=reads,
        effects_final=effects,
        reads_final=reads,
    )
    if unknown is None:  # the final answer too
        return replace(
            recovered, status_after_recovery="completed", messages_after_recovery=msgs + 1
        )
    # A person resolves it from effects.txt; resume runs the calls after it.
    return replace(
        recovered,
        status_after_recovery="awaiting_resolution",
        unknown_call=unknown,
        resolution="succeeded" if effects else "failed",
        reads_final=reads + sum(c == READ_CALL for c in remaining[1:]),
    )


# --- processes ------------------------------------------------------------------------------


def child_env() -> dict[str, str]:
    """The environment of a child that imports both ``plait`` and ``tests``."""
    src = str(Path(next(iter(plait.__path__))).parent)
    old = os.environ.get("PYTHONPATH")
    paths = [src, str(REPO), *([old] if old else [])]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(paths), "PYTHONWARNINGS": ""}


def agent_cmd(command: str, case: Case, case_dir: Path, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "tests.crash.agent_proc",
        command,
        "--store",
        case.store,
        "--dir",
        str(case_dir),
        "--order",
        case.order,
        *extra,
    ]


@dataclass(slots=True)
class Proc:
    args: list[str]
    returncode: int
    stdout: str
    stderr: str

    @property
    def data(self) -> dict[str, Any]:
        lines = self.stdout.strip().splitlines()
        if self.returncode != 0 or not lines:
            raise AssertionError(f"{self.describe()} printed no result")
        value = json.loads(lines[-1])
        assert isinstance(value, dict)
        return value

    @property
    def killed(self) -> bool:
        return self.returncode == -signal.SIGKILL

    def describe(self) -> str:
        cmd = " ".join(self.args[3:5])
        return f"`{cmd}` (exit {self.returncode})\nstdout: {self.stdout}\nstderr: {self.stderr}"


def spawn(args: list[str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        args,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        env=child_env(),
        cwd=REPO,
        text=True,
    )


def finish(p: subprocess.Popen[str], args: list[str], timeout: float = PROC_TIMEOUT) -> Proc:
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate()
        err += f"\n[harness: killed after {timeout} s]"
    return Proc(args, p.returncode, out, err)


def run_proc(args: list[str]) -> Proc:
    return finish(spawn(args), args)


# --- one case -------------------------------------------------------------------------------


@dataclass(slots=True)
class CaseResult:
    case: Case
    expected: Expected
    case_dir: Path
    crash: Proc
    crash_info: dict[str, Any] | None
    effects_at_crash: list[str]
    reads_at_crash: list[str]
    recover: Proc
    effects_after_recovery: list[str]
    reads_after_recovery: list[str]
    settle: Proc | None = None
    """Resolve + resume (a run waiting for resolution) or a new send (a run never stored)."""
    resolution: str | None = None
    effects_final: list[str] = field(default_factory=list)
    reads_final: list[str] = field(default_factory=list)
    torn_files: list[str] = field(default_factory=list)
    """JSONL session files whose content does not end with a complete line, at the end."""
    seconds: float = 0.0

    @property
    def recovered(self) -> dict[str, Any]:
        return self.recover.data

    @property
    def final(self) -> dict[str, Any]:
        """The store as the last process left it."""
        after: dict[str, Any] = (self.settle or self.recover).data["after"]
        return after


def read_lines(path: Path) -> list[str]:
    """The lines of a file, or none if it does not exist."""
    return path.read_text().splitlines() if path.exists() else []


def _torn(case_dir: Path) -> list[str]:
    torn = []
    for path in sorted((case_dir / "store" / "sessions").glob("*.jsonl")):
        data = path.read_bytes()
        if data and not data.endswith(b"\n"):
            torn.append(path.name)
            continue
        for n, line in enumerate(data.splitlines(), 1):
            try:
                json.loads(line)
            except ValueError:
                torn.append(f"{path.name}:{n}")
    return torn


def crash_args(case: Case) -> list[str]:
    if case.point == "mid_line":
        assert case.after is not None
        return ["--tear-after", case.after, "--tear-nth", str(case.nth)]
    return ["--crash-at", case.point, "--nth", str(case.nth)]


def run_case(case: Case, root: Path) -> CaseResult:
    started = time.monotonic()
    case_dir = root / case.id
    case_dir.mkdir(parents=True)
    workspace = case_dir / "workspace"
    effects, reads = workspace / "effects.txt", case_dir / "reads.log"

    crash = run_proc(agent_cmd("run", case, case_dir, *crash_args(case)))
    info_path = case_dir / "crash.json"
    crash_info = json.loads(info_path.read_text()) if info_path.exists() else None
    effects_at_crash, reads_at_crash = read_lines(effects), read_lines(reads)

    recover = run_proc(agent_cmd("recover", case, case_dir))
    result = CaseResult(
        case,
        expected(case),
        case_dir,
        crash,
        crash_info,
        effects_at_crash,
        reads_at_crash,
        recover,
        read_lines(effects),
        read_lines(reads),
    )
    if recover.returncode == 0:
        after = recover.data["after"]
        waiting = [r for r in after["runs"] if r["status"] == "awaiting_resolution"]
        unknown = [e for e in after["executions"] if e["result_status"] == "unknown"]
        if waiting and len(unknown) == 1:
            # A person checks effects.txt and records what they saw.
            applied = EFFECT_LINE in read_lines(effects)
            result.resolution = "succeeded" if applied else "failed"
            note = "effects.txt has the line" if applied else "effects.txt lacks the line"
            extra = ["--call", unknown[0]["call_id"], "--status", result.resolution]
            result.settle = run_proc(agent_cmd("resolve", case, case_dir, *extra, "--note", note))
        elif not after["runs"]:
            result.settle = run_proc(agent_cmd("run", case, case_dir))
    result.effects_final, result.reads_final = read_lines(effects), read_lines(reads)
    if case.store == "jsonl":
        result.torn_files = _torn(case_dir)
    result.seconds = time.monotonic() - started
    return result


def run_cases(
    cases: Iterable[Case], root: Path, *, workers: int | None = None
) -> dict[Case, Future[CaseResult]]:
    """Start every case in its own directory under ``root``, ``workers`` at a time."""
    pool = ThreadPoolExecutor(max_workers=workers or max(4, 2 * (os.cpu_count() or 1)))
    futures = {case: pool.submit(run_case, case, root) for case in cases}
    pool.shutdown(wait=False)
    return futures


# --- two recoverers at once -----------------------------------------------------------------


@dataclass(slots=True)
class RaceResult:
    case: Case
    case_dir: Path
    crash: Proc
    recoverers: list[Proc]
    first_to_exit: int
    effects: list[str]
    reads_at_crash: list[str]
    reads: list[str]
    final: dict[str, Any]


RACE_LEASE_SECONDS = 60
"""The recoverers' lease. The held winner blocks its event loop, so it does not renew
its lease while held; the lease must outlast any stall of the loser on a loaded machine,
or the loser could take the run over from a winner that is alive."""


def race_recovery(store: str, root: Path, *, hold: bool) -> RaceResult:
    """Crash right after the assistant message (both calls requested, none run), then
    start two recoverers released together by a barrier.

    With ``hold`` the winner stops (lease held, nothing written) at its first
    ``tool_returned`` until the loser has exited, so the loser certainly tries while
    the lease is held; without, it is a plain race."""
    case = Case(store, "assistant_saved")
    case_dir = root / f"race-{store}-{'hold' if hold else 'free'}"
    case_dir.mkdir(parents=True)
    crash = run_proc(agent_cmd("run", case, case_dir, *crash_args(case)))
    reads_at_crash = read_lines(case_dir / "reads.log")
    go, release = case_dir / "go", case_dir / "release"
    procs: list[tuple[subprocess.Popen[str], list[str]]] = []
    for name in ("a", "b"):
        args = agent_cmd(
            "recover",
            case,
            case_dir,
            "--by-id",
            "--owner",
            f"recoverer-{name}",
            "--lease",
            str(RACE_LEASE_SECONDS),
            "--ready",
            str(case_dir / f"ready-{name}"),
            "--go",
            str(go),
        )
        if hold:
            args += ["--hold-at", "tool_returned", "--hold-until", str(release)]
        procs.append((spawn(args), args))
    deadline = time.monotonic() + PROC_TIMEOUT
    while not all((case_dir / f"ready-{n}").exists() for n in "ab"):
        if time.monotonic() > deadline or any(p.poll() is not None for p, _ in procs):
            break
        time.sleep(0.002)
    go.touch()
    first = -1
    while first < 0 and time.monotonic() < deadline:
        for i, (p, _) in enumerate(procs):
            if p.poll() is not None:
                first = i
                break
        time.sleep(0.002)
    release.touch()
    results = [finish(p, args) for p, args in procs]
    inspect = run_proc(agent_cmd("inspect", case, case_dir))
    return RaceResult(
        case,
        case_dir,
        crash,
        results,
        first,
        read_lines(case_dir / "workspace" / "effects.txt"),
        reads_at_crash,
        read_lines(case_dir / "reads.log"),
        inspect.data["after"],
    )


FULL_SHAPE = ["user", "assistant", "tool_result", "tool_result", "assistant"]


def snapshot_problems(
    snap: dict[str, Any], calls: Sequence[str], *, complete: bool = True
) -> list[str]:
    """Whole-history invariants (empty when they hold): seq contiguous from 1, the
    session version at the last seq, unique message ids, the run's shape (a prefix of it
    unless ``complete``), results answering the assistant's calls in order, each once."""
    problems: list[str] = []
    messages = snap["messages"]
    seqs = [m["seq"] for m in messages]
    if seqs != list(range(1, len(messages) + 1)):
        problems.append(f"seq not contiguous from 1: {seqs}")
    if snap["version"] != len(messages):
        problems.append(f"session version {snap['version']} != {len(messages)} messages")
    ids = [m["id"] for m in messages]
    if len(set(ids)) != len(ids):
        problems.append(f"duplicate message ids: {ids}")
    kinds = [m["kind"] for m in messages]
    if kinds != (FULL_SHAPE if complete else FULL_SHAPE[: len(kinds)]):
        problems.append(f"history shape {kinds}")
        return problems
    if len(messages) >= 2 and messages[1]["calls"] != list(calls):
        problems.append(f"assistant calls {messages[1]['calls']} != {list(calls)}")
    results = [m["call_id"] for m in messages if m["kind"] == "tool_result"]
    if results != list(calls)[: len(results)]:
        problems.append(f"results {results} do not answer {list(calls)} in order, once each")
    return problems


def observed(r: CaseResult) -> Expected:
    """What the processes did, in the shape of :class:`Expected`."""
    rec = r.recover.data
    before, after = rec["before"], rec["after"]
    runs = after["runs"]
    unknown = [e["call_id"] for e in after["executions"] if e["result_status"] == "unknown"]
    return Expected(
        run_stored=bool(before["runs"]),
        durable_messages=len(before["messages"]),
        effects_at_crash=len(r.effects_at_crash),
        reads_at_crash=len(r.reads_at_crash),
        read_result_saved=any(m.get("call_id") == READ_CALL for m in before["messages"]),
        resumed=any(x["outcome"] == "resumed" for x in rec["reports"]),
        status_after_recovery=runs[0]["status"] if runs else None,
        unknown_call=unknown[0] if len(unknown) == 1 else (",".join(unknown) or None),
        messages_after_recovery=len(after["messages"]),
        effects_after_recovery=len(r.effects_after_recovery),
        reads_after_recovery=len(r.reads_after_recovery),
        resolution=r.resolution,
        effects_final=len(r.effects_final),
        reads_final=len(r.reads_final),
    )
