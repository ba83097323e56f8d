"""The agent in a real process, for the crash tests (``python -m tests.crash.agent_proc``).

One case directory holds everything a case touches::

    store.db | store/      the sqlite file or the JSONL directory
    pg_url                 PostgreSQL: the case's own database (created by its first process
                           on the server ``$PLAIT_CRASH_PG_URL`` names)
    workspace/config.toml  what ``read_config`` returns
    workspace/effects.txt  one line per application of ``append_line`` (the side effect)
    reads.log              one line per execution of ``read_config`` (outside the workspace)
    session_id             written by ``run`` once the session exists
    crash.json             written by the hook just before it kills the process

Subcommands (each prints one JSON object on its last stdout line). With ``--crash-at
POINT [--nth N]`` any of them kills itself with SIGKILL when the loop reaches the N-th
occurrence of POINT (the AgentService ``checkpoint`` hook), writing ``crash.json`` first.

``run``      create the session if needed and send one message. ``--tear-after POINT
             [--tear-nth N]`` arms the JSONL store's ``mid_line`` hook at the N-th
             occurrence of POINT instead: the process dies halfway through the next line
             written to a session file (index lines in ``runs.jsonl`` are let through).
``recover``  wait (polling the store) until every live run of the session has an expired
             lease, then ``AgentService.recover``; prints the reports and a snapshot of the
             store before and after. ``--ready``/``--go`` make a barrier for racing two
             recoverers; ``--hold-at POINT --hold-until FILE`` stops the winner at POINT
             until FILE exists (the lease stays held meanwhile).
``resolve``  resolve the run's unknown call and resume the run.
``inspect``  print a snapshot of the store.

Warnings raised in the process are recorded and printed in the JSON, not on stderr, so the
parent can assert on them and on an empty stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
import time
import warnings
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from plait.adapters.stores import Store, open_store
from plait.adapters.system import RandomIds, SystemClock
from plait.application.ports import Tool, ToolInvocation, ToolOutput
from plait.application.service import AgentService, RecoveryReport
from plait.domain.messages import AssistantMessage, ToolResultMessage, UserMessage
from plait.domain.runs import RunStatus
from plait.domain.tools import EffectClass, ToolSpec
from plait.testing import ScriptedModel

READ_CALL = "c_read"
APPEND_CALL = "c_append"
EFFECT_LINE = "deployed v2"
CONFIG_TEXT = 'name = "demo"\nversion = 2\n'
USER_TEXT = "Read the config, then record the deployment."
FINAL_TEXT = "Done: config read and deployment recorded."
LOOP_POINTS = (
    "user_saved",
    "assistant_saved",
    "execution_started",
    "tool_returned",
    "result_saved",
)
"""The AgentService checkpoints, in the order one tool-using step reaches them."""
PSEUDO_POINTS = ("session_created",)
"""Reached by this script (not the loop) right after the session is created."""
LEASE_WAIT_SECONDS = 20.0
"""How long ``recover`` polls for the dead owner's lease to expire before giving up."""


# --- the case directory ---------------------------------------------------------------------


def store_url(kind: str, case_dir: Path) -> str:
    if kind == "sqlite":
        return f"sqlite:///{(case_dir / 'store.db').resolve()}"
    if kind == "jsonl":
        return f"jsonl:///{(case_dir / 'store').resolve()}"
    if kind == "postgres":
        return _case_database(case_dir)
    raise SystemExit(f"unknown store kind {kind!r}")


def _case_database(case_dir: Path) -> str:
    """The case's own database, created on first use (named by ``$PLAIT_CRASH_PG_PREFIX``
    and a random part, so the session that made it can drop it)."""
    path = case_dir / "pg_url"
    if path.exists():
        return path.read_text()
    import secrets
    from urllib.parse import urlsplit

    import psycopg

    server = os.environ["PLAIT_CRASH_PG_URL"]
    name = f"{os.environ['PLAIT_CRASH_PG_PREFIX']}_{secrets.token_hex(4)}"
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name} TEMPLATE template0")
    url = urlsplit(server)._replace(path=f"/{name}").geturl()
    path.write_text(url)
    return url


def open_case_store(
    kind: str, case_dir: Path, mid_line: Callable[[str], None] | None = None
) -> Store:
    if mid_line is None:
        return open_store(store_url(kind, case_dir))
    if kind != "jsonl":
        raise SystemExit("a mid-line crash needs the jsonl store")
    from plait.adapters.stores.jsonl.store import JsonlStore

    return JsonlStore(case_dir / "store", checkpoint=mid_line)


def prepare(case_dir: Path) -> None:
    """Lay out a fresh case directory (idempotent)."""
    workspace = case_dir / "workspace"
    workspace.mkdir(parents=True, exist_ok=True)
    (workspace / "config.toml").write_text(CONFIG_TEXT)


# --- tools and model ------------------------------------------------------------------------


def spec(name: str, arg: str, effect: EffectClass, what: str) -> ToolSpec:
    """A tool taking one string argument ``arg``."""
    return ToolSpec(
        name=name,
        description=what,
        parameters={
            "type": "object",
            "properties": {arg: {"type": "string"}},
            "required": [arg],
            "additionalProperties": False,
        },
        effect=effect,
    )


def _tools(case_dir: Path, role: str) -> list[Tool]:
    reads_log = case_dir / "reads.log"

    async def read_config(invocation: ToolInvocation) -> ToolOutput:
        with reads_log.open("a") as f:  # counted outside the workspace
            f.write(f"{os.getpid()} {role} {invocation.call.id}\n")
        assert invocation.workspace is not None
        name = str(invocation.call.arguments()["name"])
        return ToolOutput(content=(Path(invocation.workspace) / name).read_text())

    async def append_line(invocation: ToolInvocation) -> ToolOutput:
        assert invocation.workspace is not None
        line = str(invocation.call.arguments()["line"])
        with (Path(invocation.workspace) / "effects.txt").open("a") as f:
            f.write(line + "\n")
        return ToolOutput(content=f"appended {line!r} to effects.txt")

    return [
        Tool(
            spec=spec("read_config", "name", EffectClass.READ_ONLY, "Read a config file."),
            execute=read_config,
        ),
        Tool(
            spec=spec("append_line", "line", EffectClass.SIDE_EFFECT, "Append to effects.txt."),
            execute=append_line,
        ),
    ]


def script(order: str) -> dict[str, Any]:
    """Turn 1: two calls (read-only and side effect, in ``order``); turn 2: the answer."""
    read = {"id": READ_CALL, "name": "read_config", "arguments": {"name": "config.toml"}}
    append = {"id": APPEND_CALL, "name": "append_line", "arguments": {"line": EFFECT_LINE}}
    calls = [read, append] if order == "read_first" else [append, read]
    return {
        "version": 1,
        "assistant": [
            {"text": "Reading, then recording.", "tool_calls": calls},
            {"text": FINAL_TEXT},
        ],
    }


def make_service(
    store: Store,
    case_dir: Path,
    *,
    order: str,
    role: str,
    lease: float,
    owner: str | None,
    checkpoint: Callable[[str], None] | None,
) -> AgentService:
    return AgentService.build(
        store=store,
        artifacts=store,
        model=ScriptedModel(script(order)),
        tools=_tools(case_dir, role),
        clock=SystemClock(),
        ids=RandomIds(),
        owner=owner,
        lease_seconds=lease,
        checkpoint=checkpoint,
    )


# --- hooks ----------------------------------------------------------------------------------


class Hooks:
    """The test-only checkpoint hooks: crash, tear a JSONL line, or hold."""

    def __init__(self, args: argparse.Namespace, case_dir: Path) -> None:
        self.case_dir = case_dir
        self.command: str = args.command
        self.crash_at: str | None = getattr(args, "crash_at", None)
        self.nth: int = getattr(args, "nth", 1)
        self.tear_after: str | None = getattr(args, "tear_after", None)
        self.tear_nth: int = getattr(args, "tear_nth", 1)
        self.hold_at: str | None = getattr(args, "hold_at", None)
        self.hold_until: Path | None = getattr(args, "hold_until", None)
        self.seen: Counter[str] = Counter()
        self.points: list[str] = []
        self.armed = False
        self.held = False

    def loop(self, point: str) -> None:
        """The AgentService checkpoint (and this script's pseudo-points)."""
        self.seen[point] += 1
        self.points.append(f"{point}#{self.seen[point]}")
        if point == self.crash_at and self.seen[point] == self.nth:
            self._die(point, self.nth)
        if point == self.tear_after and self.seen[point] == self.tear_nth:
            self.armed = True
        if point == self.hold_at and not self.held:
            self.held = True
            self._hold()

    def store(self, point: str) -> None:
        """The JsonlStore checkpoint: ``mid_line`` is reached with half a line written."""
        if point != "mid_line" or not self.armed:
            return
        torn = self._torn_session_files()
        if torn:  # a session line (not a runs.jsonl index line) is half written
            self._die("mid_line", 1, after=f"{self.tear_after}#{self.tear_nth}", torn=torn)

    def _torn_session_files(self) -> list[str]:
        torn = []
        for path in sorted((self.case_dir / "store" / "sessions").glob("*.jsonl")):
            data = path.read_bytes()
            if data and not data.endswith(b"\n"):
                torn.append(path.name)
        return torn

    def _die(self, point: str, nth: int, **extra: object) -> None:
        info = {"command": self.command, "point": point, "nth": nth, "pid": os.getpid()}
        info.update(points=self.points, **extra)
        (self.case_dir / "crash.json").write_text(json.dumps(info))
        sys.stdout.flush()
        os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(30)  # never reached: SIGKILL to oneself is delivered at once
        raise SystemExit("SIGKILL did not kill the process")

    def _hold(self) -> None:
        """Block (lease held, no writes) until the parent says go on."""
        assert self.hold_until is not None
        (self.case_dir / f"holding-{os.getpid()}").touch()
        deadline = time.monotonic() + 20
        while not self.hold_until.exists():
            if time.monotonic() > deadline:
                raise SystemExit(f"held at {self.hold_at} for 20 s; never released")
            time.sleep(0.005)


# --- snapshots ------------------------------------------------------------------------------


async def snapshot(store: Store, session_id: str) -> dict[str, Any]:
    session = await store.get_session(session_id)
    messages: list[dict[str, Any]] = []
    for sm in await store.read_messages(session_id):
        m = sm.message
        item: dict[str, Any] = {"seq": sm.seq, "id": m.id, "kind": m.kind, "run_id": m.run_id}
        if isinstance(m, UserMessage):
            item["text"] = m.text
        elif isinstance(m, AssistantMessage):
            item["text"] = m.text
            item["calls"] = [c.id for c in m.tool_calls]
        elif isinstance(m, ToolResultMessage):
            item["call_id"] = m.result.call_id
            item["tool"] = m.tool_name
            item["status"] = m.result.status.value
            item["content"] = m.result.content
        messages.append(item)
    runs: list[dict[str, Any]] = []
    executions: list[dict[str, Any]] = []
    for run in await store.list_runs(session_id=session_id):
        runs.append(
            {
                "id": run.id,
                "status": run.status.value,
                "lease_owner": None if run.lease is None else run.lease.owner,
                "error": None if run.error is None else run.error.code,
            }
        )
        for r in await store.get_executions(run.id):
            executions.append(
                {
                    "run_id": r.run_id,
                    "call_id": r.call_id,
                    "tool": r.tool_name,
                    "effect": r.effect.value,
                    "state": r.state.value,
                    "result_status": None if r.result_status is None else r.result_status.value,
                    "note": r.note,
                }
            )
    return {
        "version": session.version,
        "active_run_id": session.active_run_id,
        "messages": messages,
        "runs": runs,
        "executions": executions,
    }


def _report(r: RecoveryReport) -> dict[str, Any]:
    status = None if r.result is None else r.result.run.status.value
    return {"run_id": r.run_id, "outcome": r.outcome, "detail": r.detail, "status": status}


async def _wait_stale(store: Store, session_id: str) -> float:
    """Poll until no live run of the session holds an unexpired lease; the time waited."""
    started = time.monotonic()
    try:
        async with asyncio.timeout(LEASE_WAIT_SECONDS):
            while True:
                now = time.time()
                left = [
                    r.lease.expires_at - now
                    for r in await store.list_runs(session_id=session_id)
                    if not r.status.terminal and r.lease is not None and r.lease.expires_at > now
                ]
                if not left:
                    return time.monotonic() - started
                await asyncio.sleep(min(max(left) + 0.002, 0.5))
    except TimeoutError:
        raise SystemExit(f"a lease did not expire within {LEASE_WAIT_SECONDS} s") from None


def _wait_file(path: Path, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if time.monotonic() > deadline:
            raise SystemExit(f"{path} never appeared")
        time.sleep(0.002)


# --- subcommands ----------------------------------------------------------------------------


async def cmd_run(args: argparse.Namespace, case_dir: Path, hooks: Hooks) -> dict[str, Any]:
    prepare(case_dir)
    mid = hooks.store if args.tear_after else None
    store = open_case_store(args.store, case_dir, mid)
    try:
        service = make_service(
            store,
            case_dir,
            order=args.order,
            role="run",
            lease=args.lease,
            owner=args.owner,
            checkpoint=hooks.loop,
        )
        sid_file = case_dir / "session_id"
        if sid_file.exists():
            session_id = sid_file.read_text()
        else:
            session = await service.create_session(workspace=str(case_dir / "workspace"))
            session_id = session.id
            sid_file.write_text(session_id)
        hooks.loop("session_created")
        result = await service.send(session_id, args.text)
        return {
            "run_id": result.run.id,
            "status": result.run.status.value,
            "points": hooks.points,
            "after": await snapshot(store, session_id),
        }
    finally:
        await store.close()


async def cmd_recover(args: argparse.Namespace, case_dir: Path, hooks: Hooks) -> dict[str, Any]:
    store = open_case_store(args.store, case_dir)
    try:
        service = make_service(
            store,
            case_dir,
            order=args.order,
            role=f"recover-{args.owner or os.getpid()}",
            lease=args.lease,
            owner=args.owner,
            checkpoint=hooks.loop,
        )
        session_id = (case_dir / "session_id").read_text()
        waited = await _wait_stale(store, session_id)
        before = await snapshot(store, session_id)
        run_id = None
        if args.by_id:
            run_id = before["runs"][0]["id"]
        if args.ready is not None:
            args.ready.touch()
            _wait_file(args.go)
        reports = await service.recover(run_id=run_id)
        return {
            "waited": waited,
            "reports": [_report(r) for r in reports],
            "points": hooks.points,
            "before": before,
            "after": await snapshot(store, session_id),
        }
    finally:
        await store.close()


async def cmd_resolve(args: argparse.Namespace, case_dir: Path, hooks: Hooks) -> dict[str, Any]:
    store = open_case_store(args.store, case_dir)
    try:
        service = make_service(
            store,
            case_dir,
            order=args.order,
            role="resolve",
            lease=args.lease,
            owner=args.owner,
            checkpoint=hooks.loop,
        )
        session_id = (case_dir / "session_id").read_text()
        runs = await store.list_runs(session_id=session_id)
        waiting = [r for r in runs if r.status is RunStatus.AWAITING_RESOLUTION]
        if len(waiting) != 1:
            raise SystemExit(f"expected one run awaiting resolution, got {runs}")
        run_id = waiting[0].id
        await service.resolve(run_id, args.call, args.status, args.note)
        result = await service.resume(run_id)
        return {
            "status": result.run.status.value,
            "points": hooks.points,
            "after": await snapshot(store, session_id),
        }
    finally:
        await store.close()


async def cmd_inspect(args: argparse.Namespace, case_dir: Path, hooks: Hooks) -> dict[str, Any]:
    store = open_case_store(args.store, case_dir)
    try:
        return {"after": await snapshot(store, (case_dir / "session_id").read_text())}
    finally:
        await store.close()


COMMANDS = {"run": cmd_run, "recover": cmd_recover, "resolve": cmd_resolve, "inspect": cmd_inspect}


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m tests.crash.agent_proc")
    sub = p.add_subparsers(dest="command", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--store", choices=("sqlite", "jsonl", "postgres"), required=True)
    common.add_argument("--dir", type=Path, required=True, help="the case directory")
    common.add_argument("--order", choices=("read_first", "append_first"), default="read_first")
    common.add_argument("--lease", type=float, default=0.5, help="lease seconds")
    common.add_argument("--owner", default=None)
    common.add_argument("--crash-at", choices=LOOP_POINTS + PSEUDO_POINTS)
    common.add_argument("--nth", type=int, default=1)

    run = sub.add_parser("run", parents=[common])
    run.add_argument("--text", default=USER_TEXT)
    run.add_argument("--tear-after", choices=LOOP_POINTS + PSEUDO_POINTS)
    run.add_argument("--tear-nth", type=int, default=1)

    rec = sub.add_parser("recover", parents=[common])
    rec.add_argument("--by-id", action="store_true", help="recover the session's run by id")
    rec.add_argument("--ready", type=Path, help="touch this once ready to recover")
    rec.add_argument("--go", type=Path, help="then wait for this file before recovering")
    rec.add_argument("--hold-at", choices=LOOP_POINTS)
    rec.add_argument("--hold-until", type=Path)

    res = sub.add_parser("resolve", parents=[common])
    res.add_argument("--call", required=True)
    res.add_argument("--status", choices=("succeeded", "failed"), required=True)
    res.add_argument("--note", required=True)

    sub.add_parser("inspect", parents=[common])
    return p


def main(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    case_dir: Path = args.dir.resolve()
    hooks = Hooks(args, case_dir)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        output = asyncio.run(COMMANDS[args.command](args, case_dir, hooks))
    output["warnings"] = [f"{w.category.__name__}: {w.message}" for w in caught]
    output["pid"] = os.getpid()
    print(json.dumps(output), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
