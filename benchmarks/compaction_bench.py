"""Context building with token accounting for a 10,000-message session (DESIGN §11:
build ≤ 10 ms), with and without compaction, and what each call would send.

    uv run python benchmarks/compaction_bench.py [--messages 10000] [--steps 200]

A SQLite store (WAL, synchronous=FULL) holds a generated coding session (a user request,
then rounds of: assistant call, tool output of ~600 characters, assistant note). Timed:

- cold: the first context build for the session in a fresh service (every message is
  counted once, then cached per message id and meter, and stored with the history);
- resumed: the first build in another fresh service over the same store (a process
  resuming the session: with ``--meter openai`` the stored counts are read, nothing is
  counted again; the estimate meter stores none, counting characters is cheaper);
- per step: each step appends one round (three messages, committed) and builds the next
  context — the hot path a run takes before every model call (reads the active summary
  and the constraint records from the store, takes in the new messages' counts, sums);
- compaction: one summarizer pass over the prefix with a deterministic stand-in
  summarizer (so this measures plait's side, not a model).

Token counts use the conservative estimate meter; the window is 128,000 tokens.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

from plait.adapters.stores.sqlite.store import SqliteStore
from plait.adapters.tokens import OpenAIMeter
from plait.application.compaction import (
    CompactionService,
    ModelProfile,
    ModelProfiles,
)
from plait.application.compaction.estimate import EstimateMeter
from plait.application.ports import Commit, ModelCapabilities, TokenMeter
from plait.domain.compaction import CompactionSettings
from plait.domain.messages import Message, UserMessage
from plait.domain.session import Session
from plait.eval.extractive import MODEL, extractive_summary, generated_round
from plait.testing import FixedClock, FunctionModel, SequentialIds

WINDOW = 128_000


def service(store: SqliteStore, meter_name: str = "estimate") -> CompactionService:
    meter: TokenMeter = OpenAIMeter() if meter_name == "openai" else EstimateMeter()
    summarizer = FunctionModel(
        extractive_summary,
        name="extractive",
        capabilities=ModelCapabilities(context_window=1_000_000, structured_output=True),
    )
    profiles = ModelProfiles(
        [
            ModelProfile(model=MODEL, meter=meter, context_window=WINDOW, max_output_tokens=8_192),
            ModelProfile(model="extractive", meter=meter, context_window=1_000_000),
        ]
    )
    return CompactionService(
        store=store,
        profiles=profiles,
        summarizer=summarizer,
        clock=FixedClock(),
        ids=SequentialIds(),
        settings=CompactionSettings(max_compactions_per_run=10_000),
    )


async def append(store: SqliteStore, history: list[Message], new: list[Message]) -> None:
    await store.commit(
        Commit(session_id="bench", expected_version=len(history), messages=tuple(new))
    )
    history.extend(new)


async def steps(
    svc: CompactionService, store: SqliteStore, history: list[Message], n: int, first_round: int
) -> tuple[list[float], list[int], list[int]]:
    times, sent, full = [], [], []
    for r in range(first_round, first_round + n):
        await append(store, history, generated_round(r, len(history) + 1))
        t = time.perf_counter()
        view = await svc.view("bench", history, model=MODEL, instructions="", tools=())
        times.append((time.perf_counter() - t) * 1000)
        sent.append(view.tokens.total)
        full.append(view.full_history_tokens)
    return times, sent, full


def pct(values: list[float], q: float) -> float:
    return sorted(values)[min(int(len(values) * q), len(values) - 1)]


async def main(messages: int, n_steps: int, db: Path, meter: str = "estimate") -> None:
    store = SqliteStore.open(db)
    await store.create_session(Session(id="bench", created_at=0.0))
    history: list[Message] = []
    await append(store, history, [UserMessage(id="m1", text="Fix the shop.", created_at=0)])
    r = 0
    while len(history) < messages:
        await append(store, history, generated_round(r, len(history) + 1))
        r += 1
    print(f"session: {len(history)} messages in {db}")

    svc = service(store, meter)
    t = time.perf_counter()
    view = await svc.view("bench", history, model=MODEL, instructions="", tools=())
    cold = (time.perf_counter() - t) * 1000
    print(f"cold build (counts every message once): {cold:.1f} ms, {view.tokens.total} tokens")
    t = time.perf_counter()
    fresh = service(store, meter)
    again = await fresh.view("bench", history, model=MODEL, instructions="", tools=())
    resumed = (time.perf_counter() - t) * 1000
    assert again.tokens == view.tokens
    print(f"resumed build (a fresh service reads the stored counts): {resumed:.1f} ms")

    raw_t, raw_sent, _ = await steps(svc, store, history, n_steps, r)
    r += n_steps
    print(
        f"per step, no summary:   median {statistics.median(raw_t):.2f} ms, "
        f"p95 {pct(raw_t, 0.95):.2f} ms; sends {raw_sent[-1]} tokens (the whole history)"
    )

    t = time.perf_counter()
    outcome = await svc.compact("bench", trigger="manual", model=MODEL)
    took = (time.perf_counter() - t) * 1000
    assert outcome.status == "compacted", outcome
    s = outcome.summary
    assert s is not None
    print(
        f"compaction (stand-in summarizer): {took:.0f} ms; summary covers "
        f"1..{s.covered_through_seq} ({s.source_tokens} tokens) in {s.summary_tokens} tokens"
    )

    comp_t, comp_sent, comp_full = await steps(svc, store, history, n_steps, r)
    print(
        f"per step, with summary: median {statistics.median(comp_t):.2f} ms, "
        f"p95 {pct(comp_t, 0.95):.2f} ms; sends {comp_sent[-1]} tokens instead of "
        f"{comp_full[-1]} ({100 * comp_sent[-1] / comp_full[-1]:.1f}%)"
    )
    await store.close()


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--messages", type=int, default=10_000)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--meter", choices=["estimate", "openai"], default="estimate")
    a = p.parse_args()
    with tempfile.TemporaryDirectory() as d:
        asyncio.run(main(a.messages, a.steps, Path(d) / "bench.db", a.meter))
