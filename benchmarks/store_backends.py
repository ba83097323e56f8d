"""SQLite and JSONL side by side on two of the peer workloads (the JSONL decision in
docs/architecture-stores.md): each measurement runs in a fresh process, the backends
interleaved rep by rep.

    uv run python benchmarks/store_backends.py --reps 5

- step: a W1-like run, 200 tool-call steps (echo tool, 1 KB result) then an answer,
  through AgentService, timed from ``send`` to its return (microseconds per step).
- resume: a fresh process opens the store, appends one user message to a 5,000-message
  session and runs until the fake model is called with all 5,001 messages (ms).

The stores are opened as ``plait`` opens them (JSONL behind its I/O thread). Wall time and
the process's CPU time (all threads) are printed: on a loaded machine the CPU time is the
steadier figure; the wall time also holds the fsyncs.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
BACKENDS = ("sqlite", "jsonl")


def url_of(backend: str, where: Path) -> str:
    return (
        f"sqlite:///{where / 'plait.db'}" if backend == "sqlite" else f"jsonl:///{where / 'store'}"
    )


def open_as_plait(url: str) -> Any:
    from plait.adapters.stores import open_store
    from plait.adapters.stores.shared.offload import Offloaded

    store = open_store(url, create=True)
    return Offloaded(store) if url.startswith("jsonl:") else store


async def step(url: str, steps: int) -> dict[str, Any]:
    sys.path.insert(0, str(HERE))
    from drv_plait import FakeModel, build_agent
    from plait.domain.runs import RunStatus

    store = open_as_plait(url)
    model = FakeModel(steps)
    agent = build_agent(store, model, 1000)
    session = await agent.create_session()
    started, cpu = time.perf_counter(), time.process_time()
    result = await agent.send(session.id, "please call echo repeatedly")
    elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
    assert result.run.status is RunStatus.COMPLETED, result.run
    await store.close()
    return {"step": round(elapsed / steps * 1e6, 1), "step_cpu": round(cpu / steps * 1e6, 1)}


async def build(url: str, history: int) -> dict[str, Any]:
    sys.path.insert(0, str(HERE))
    from drv_plait import history_spec
    from plait.adapters.system import RandomIds
    from plait.application.ports import Commit
    from plait.domain.messages import (
        AssistantMessage,
        Message,
        ToolCall,
        ToolResult,
        ToolResultMessage,
        ToolStatus,
        UserMessage,
    )
    from plait.domain.session import Session

    store = open_as_plait(url)
    await store.create_session(Session(id="ses_main", created_at=time.time()))
    ids = RandomIds()
    now = time.time()
    messages: list[Message] = []
    for kind, _index, text, call_id in history_spec(history, 500):
        message_id = ids.new("msg")
        if kind == "user":
            messages.append(UserMessage(id=message_id, text=text, created_at=now))
        elif kind == "call":
            call = ToolCall.create(id=call_id, name="echo", arguments={"text": text})
            messages.append(
                AssistantMessage(id=message_id, text="", created_at=now, tool_calls=(call,))
            )
        elif kind == "tool":
            result = ToolResult(call_id=call_id, status=ToolStatus.SUCCEEDED, content=text)
            messages.append(
                ToolResultMessage(id=message_id, tool_name="echo", result=result, created_at=now)
            )
        else:
            messages.append(AssistantMessage(id=message_id, text=text, created_at=now))
    await store.commit(Commit(session_id="ses_main", expected_version=0, messages=tuple(messages)))
    await store.close()
    return {}


async def resume(url: str, history: int) -> dict[str, Any]:
    sys.path.insert(0, str(HERE))
    from drv_plait import FakeModel, build_agent

    model = FakeModel(0)
    started, cpu = time.perf_counter(), time.process_time()
    store = open_as_plait(url)
    agent = build_agent(store, model, 1000)
    await agent.send("ses_main", "resume: next question")
    cpu = time.process_time() - cpu  # to the end of the run: the answer is one more commit
    assert model.first_call_len == history + 1, model.first_call_len
    assert model.first_call_t is not None
    result = {"resume": round((model.first_call_t - started) * 1e3, 1)}
    result["resume_cpu"] = round(cpu * 1e3, 1)
    await store.close()
    return result


def child(args: argparse.Namespace) -> None:
    work = {"step": lambda: step(args.url, args.steps), "build": lambda: build(args.url, 5000)}
    work["resume"] = lambda: resume(args.url, 5000)
    print(json.dumps(asyncio.run(work[args.child]())))


def spawn(what: str, url: str, steps: int) -> dict[str, Any]:
    command = [sys.executable, __file__, "--child", what, "--url", url, "--steps", str(steps)]
    out = subprocess.run(command, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise SystemExit(f"{what} on {url} failed:\n{out.stderr[-3000:]}")
    found: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return found


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--child")
    parser.add_argument("--url")
    args = parser.parse_args()
    if args.child:
        child(args)
        return
    kinds = ("step", "step_cpu", "resume", "resume_cpu")
    figures: dict[str, dict[str, list[float]]] = {
        backend: {kind: [] for kind in kinds} for backend in BACKENDS
    }
    with tempfile.TemporaryDirectory() as tmp:
        for rep in range(args.reps):
            for backend in BACKENDS:
                where = Path(tmp) / f"{backend}-{rep}"
                where.mkdir()
                url = url_of(backend, where)
                measured = spawn("step", url, args.steps)
                shutil.rmtree(where)
                where.mkdir()
                spawn("build", url, args.steps)
                measured |= spawn("resume", url, args.steps)
                shutil.rmtree(where)
                for kind in kinds:
                    figures[backend][kind].append(measured[kind])
    print(f"load average {os.getloadavg()[0]:.1f}; {args.reps} interleaved reps, median (min)")
    print(
        f"{'backend':8} {'step us':>14} {'step cpu us':>14} {'resume ms':>14} {'resume cpu ms':>14}"
    )
    for backend in BACKENDS:
        cells = [
            f"{statistics.median(figures[backend][kind]):.0f} ({min(figures[backend][kind]):.0f})"
            for kind in kinds
        ]
        print(f"{backend:8} " + " ".join(f"{cell:>14}" for cell in cells))
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
