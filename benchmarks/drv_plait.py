"""plait's driver for the peer benchmark's workloads (../shared/peer-bench/README.md).

Same protocol as the peers' drivers: ``python benchmarks/drv_plait.py WORKLOAD --db PATH``
prints one JSON object on its last stdout line, with the same keys, so
``benchmarks/compare.py`` can put plait beside LangGraph, the Agents SDK and Pydantic AI.

- w1    200 tool-call steps (echo tool, 1 KB result) then an answer, through AgentService
        on SQLite (WAL, synchronous=FULL), timed from just before ``send`` to its return.
        Also reports the cost of single steps early in the run and at its end, to show
        whether per-step cost grows with history (run with ``--steps 1000``). With
        ``--model-ms N`` every model call takes N ms (the loop is free meanwhile): the step
        then costs N ms plus what is not overlapped with the model's time. ``--markers``
        calls ``os.getppid()`` as the window opens, at each model call and as it closes,
        for ``benchmarks/w1_instructions.py --segments`` (callgrind dumps its counts
        there); ``--warm`` runs the workload once first, on its own store, so that the
        measured run is a process's second.
- build a 5,000-message session (user / assistant tool call / tool result / assistant text,
        ~500 B each), not timed for the table.
- w2    fresh process: open the store, build the agent, append one user message and run
        until the fake model is called with all 5,001 messages. The store's I/O mode is
        ``--store-io`` as for w1: ``inline`` by default, what ``Runtime.open`` gives a
        process that drives one run (the CLI, the Python API: how a session is resumed in
        a fresh process); ``thread`` is what ``plait serve`` and workers use.
"""

from __future__ import annotations

import time

T_PROCESS_START = time.perf_counter()

import argparse  # noqa: E402
import asyncio  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import resource  # noqa: E402
import sqlite3  # noqa: E402
import statistics  # noqa: E402
from collections.abc import Callable, Iterator  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

T_IMPORT_START = time.perf_counter()
# plait imports jsonschema (~65 ms) the first time a tool of one's own is registered (its
# schema is checked then); W2 leaves Python imports out and reports them separately (the
# peers import their frameworks, pydantic included, at the top), so it is imported here.
import jsonschema  # noqa: E402, F401

import plait  # noqa: E402
from plait.adapters.stores.sqlite.store import SqliteStore, load_deferred  # noqa: E402
from plait.adapters.system import RandomIds, SystemClock  # noqa: E402
from plait.application.ports import (  # noqa: E402
    Commit,
    CommitResult,
    ModelRequest,
    ModelResponse,
    RawToolCall,
    Tool,
    ToolInvocation,
    ToolOutput,
)
from plait.application.service import AgentService  # noqa: E402
from plait.domain.errors import SessionNotFoundError  # noqa: E402
from plait.domain.messages import (  # noqa: E402
    AssistantMessage,
    Message,
    ToolCall,
    ToolResult,
    ToolResultMessage,
    ToolStatus,
    Usage,
    UserMessage,
)
from plait.domain.runs import Budget, RunStatus  # noqa: E402
from plait.domain.session import Session  # noqa: E402
from plait.domain.tools import EffectClass, ToolSpec  # noqa: E402
from plait.testing import FunctionModel  # noqa: E402

# The store imports its row codec, shared state and write path (and each capability's
# module) at its first read or write, so that opening a store stays cheap (Runtime.open's
# start-up). The workloads leave Python imports out of their windows, as the peers' drivers
# import their frameworks at the top: those are imported here, and counted in import_s.
load_deferred()

T_IMPORTED = time.perf_counter()

# --- the workloads' shapes, as in peer-bench/common.py -----------------------------------------


def payload(tag: str, n: int) -> str:
    base = f"[{tag}] lorem ipsum dolor sit amet consectetur adipiscing elit "
    return (base * (n // len(base) + 1))[:n]


def echo_result(text: str, n: int) -> str:
    unit = text + " "
    return (unit * (n // len(unit) + 1))[:n]


def history_spec(h: int, msg_bytes: int) -> Iterator[tuple[str, int, str, str]]:
    for i in range(h):
        turn, k = divmod(i, 4)
        call_id = f"hist_call_{turn}"
        if k == 0:
            yield ("user", i, payload(f"u{turn}", msg_bytes), call_id)
        elif k == 1:
            yield ("call", i, payload(f"c{turn}", msg_bytes - 12), call_id)
        elif k == 2:
            yield ("tool", i, payload(f"t{turn}", msg_bytes), call_id)
        else:
            yield ("answer", i, payload(f"a{turn}", msg_bytes), call_id)


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def db_bytes(path: str) -> int:
    return sum(os.path.getsize(path + s) for s in ("", "-wal", "-shm") if os.path.exists(path + s))


def fresh_db(path: str) -> None:
    for suffix in ("", "-wal", "-shm", "-journal"):
        Path(path + suffix).unlink(missing_ok=True)


# --- the agent ------------------------------------------------------------------------------

ECHO = ToolSpec(
    name="echo",
    description="Echo the text back, repeated.",
    parameters={
        "type": "object",
        "properties": {"text": {"type": "string"}},
        "required": ["text"],
        "additionalProperties": False,
    },
    effect=EffectClass.READ_ONLY,
)


def echo_tool(tool_bytes: int) -> Tool:
    async def echo(invocation: ToolInvocation) -> ToolOutput:
        return ToolOutput(content=echo_result(invocation.call.arguments()["text"], tool_bytes))

    return Tool(spec=ECHO, execute=echo)


class FakeModel:
    """Instant deterministic model: ``steps`` echo calls, then an answer."""

    def __init__(self, steps: int) -> None:
        self.steps = steps
        self.calls = 0
        self.first_call_t: float | None = None
        self.first_call_len: int | None = None
        self.call_times: list[float] = []

    markers = False
    """Call :func:`_marker` at each call (``--markers``)."""

    def __call__(self, request: ModelRequest) -> ModelResponse:
        now = time.perf_counter()
        if self.markers:
            _marker()
        self.call_times.append(now)
        if self.first_call_t is None:
            self.first_call_t = now
            self.first_call_len = len(request.context.items)
        n = self.calls
        self.calls += 1
        usage = Usage(input_tokens=100, output_tokens=10)
        if n < self.steps:
            args = json.dumps({"text": f"step-{n}"})
            call = RawToolCall(id=f"call_{n}", name="echo", arguments=args)
            return ModelResponse(tool_calls=(call,), usage=usage)
        return ModelResponse(text=f"done after {n} tool calls", usage=usage)


class SlowModel(FakeModel):
    """:class:`FakeModel` that answers after ``latency_s`` (the event loop is free meanwhile,
    as with a real provider): shows what the step costs beyond the model's own time."""

    def __init__(self, steps: int, latency_s: float) -> None:
        super().__init__(steps)
        self.latency_s = latency_s

    async def answer(self, request: ModelRequest) -> ModelResponse:
        await asyncio.sleep(self.latency_s)
        return self(request)


class CountingStore(SqliteStore):
    """Counts the write transactions the run makes (sessions, run starts, commits)."""

    writes = 0

    async def create_session(self, session: Session) -> None:
        self.writes += 1
        await super().create_session(session)

    async def start_run(self, commit: Commit) -> CommitResult:
        self.writes += 1
        return await super().start_run(commit)

    def commit_soon(
        self, commit: Commit, *, after: Callable[[], None] | None = None, hold: bool = False
    ) -> asyncio.Future[CommitResult]:
        self.writes += 1
        return super().commit_soon(commit, after=after, hold=hold)


def bench_telemetry() -> Any:
    """OpenTelemetry on, as a service would run it (batched span export, metrics), its
    exporter dropping what it is sent: the cost measured is plait's and the SDK's."""
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

    from plait.adapters.telemetry._otel import OtelTelemetry

    class Dropping(SpanExporter):
        def export(self, spans: Any) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(Dropping()))
    return OtelTelemetry(tracer_provider=provider, meter_provider=MeterProvider())


def build_agent(
    store: SqliteStore, model: FakeModel, tool_bytes: int, telemetry: Any = None
) -> AgentService:
    fn = model.answer if isinstance(model, SlowModel) else model
    return AgentService.build(
        telemetry=telemetry,
        store=store,
        artifacts=store,
        model=FunctionModel(fn, name="fake"),
        tools=[echo_tool(tool_bytes)],
        clock=SystemClock(),
        ids=RandomIds(),
        budget=Budget(max_steps=None, max_model_calls=None, deadline_seconds=None),
    )


# --- workloads ------------------------------------------------------------------------------


def _marker() -> None:
    """A call callgrind can be told to dump its counts before (``--dump-before=os_getppid``):
    nothing else in a W1 run asks for the parent's pid."""
    os.getppid()


async def w1(a: argparse.Namespace, res: dict[str, Any]) -> None:
    if a.warm:  # the same run first, on a store of its own
        await w1(argparse.Namespace(**{**vars(a), "warm": False, "db": a.db + ".warm"}), {})
        fresh_db(a.db + ".warm")
    fresh_db(a.db)
    t_setup = time.perf_counter()
    store = CountingStore(a.db, io=a.store_io)
    model = SlowModel(a.steps, a.model_ms / 1e3) if a.model_ms else FakeModel(a.steps)
    model.markers = a.markers
    telemetry = bench_telemetry() if a.variant == "telemetry" else None
    agent = build_agent(store, model, a.tool_bytes, telemetry)
    session = await agent.create_session()
    if a.markers:
        _marker()
    t0 = time.perf_counter()
    result = await agent.send(session.id, "please call echo repeatedly")
    t1 = time.perf_counter()
    if a.markers:
        _marker()
    assert result.run.status is RunStatus.COMPLETED, result.run
    history = await store.read_messages(session.id)
    assert len(history) == 2 * a.steps + 2, len(history)
    assert model.calls == a.steps + 1
    # One step = model call -> commit (the last result, if not written yet, with the
    # assistant message) -> tool -> next model call.
    gaps = [(b - x) * 1e6 for x, b in zip(model.call_times, model.call_times[1:], strict=False)]
    early = gaps[5:15] if len(gaps) >= 15 else gaps
    late = gaps[-10:]
    res.update(
        setup_s=round(t0 - t_setup, 4),
        w1_total_s=round(t1 - t0, 4),
        w1_us_per_step=round((t1 - t0) / a.steps * 1e6, 1),
        step_us_early=round(statistics.median(early), 1),
        step_us_late=round(statistics.median(late), 1),
        model_ms=a.model_ms,
        persisted_messages=len(history),
        commits=store.writes,
        db_bytes=db_bytes(a.db),
        telemetry=telemetry is not None,
        store_io=a.store_io,
    )
    if telemetry is not None:
        telemetry.shutdown()
    await store.close()


async def build(a: argparse.Namespace, res: dict[str, Any]) -> None:
    from plait.application.ports import Commit

    fresh_db(a.db)
    t0 = time.perf_counter()
    store = SqliteStore(a.db)
    session = Session(id="ses_main", created_at=time.time())
    await store.create_session(session)
    ids = RandomIds()
    now = time.time()
    messages: list[Message] = []
    for kind, _i, text, call_id in history_spec(a.history, a.msg_bytes):
        mid = ids.new("msg")
        if kind == "user":
            messages.append(UserMessage(id=mid, text=text, created_at=now))
        elif kind == "call":
            call = ToolCall.create(id=call_id, name="echo", arguments={"text": text})
            messages.append(AssistantMessage(id=mid, text="", created_at=now, tool_calls=(call,)))
        elif kind == "tool":
            result = ToolResult(call_id=call_id, status=ToolStatus.SUCCEEDED, content=text)
            messages.append(
                ToolResultMessage(id=mid, tool_name="echo", result=result, created_at=now)
            )
        else:
            messages.append(AssistantMessage(id=mid, text=text, created_at=now))
    await store.commit(Commit(session_id=session.id, expected_version=0, messages=tuple(messages)))
    await store.close()
    res.update(build_s=round(time.perf_counter() - t0, 3), db_bytes=db_bytes(a.db))


async def w2(a: argparse.Namespace, res: dict[str, Any]) -> None:
    model = FakeModel(0)  # answers at once
    t0 = time.perf_counter()
    store = SqliteStore(a.db, io=a.store_io)
    agent = build_agent(store, model, a.tool_bytes)
    try:
        result = await agent.send("ses_main", "resume: next question")
    except SessionNotFoundError:
        raise SystemExit(f"{a.db} has no session ses_main; build it: {a.build_command}") from None
    t1 = time.perf_counter()
    assert result.run.status is RunStatus.COMPLETED
    assert model.first_call_len == a.history + 1, model.first_call_len
    assert model.first_call_t is not None
    res.update(
        w2_ms=round((model.first_call_t - t0) * 1e3, 2),
        w2_total_ms=round((t1 - t0) * 1e3, 2),
        model_saw=model.first_call_len,
        store_io=a.store_io,
    )
    await store.close()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("workload", choices=["w1", "build", "w2"])
    p.add_argument("--db", required=True)
    p.add_argument("--steps", type=int, default=int(os.environ.get("BENCH_STEPS", 200)))
    p.add_argument("--history", type=int, default=int(os.environ.get("BENCH_HISTORY", 5000)))
    p.add_argument("--msg-bytes", type=int, default=int(os.environ.get("BENCH_MSG_BYTES", 500)))
    p.add_argument("--tool-bytes", type=int, default=int(os.environ.get("BENCH_TOOL_BYTES", 1024)))
    p.add_argument("--variant", default="")
    p.add_argument(
        "--store-io",
        choices=["inline", "thread"],
        default=os.environ.get("BENCH_STORE_IO", "inline"),
        help="w1, w2: where the store's calls run (inline: one run per process, as the CLI)",
    )
    p.add_argument(
        "--model-ms", type=float, default=0.0, help="w1: each model call takes this long"
    )
    p.add_argument("--markers", action="store_true", help="w1: mark the window's segments")
    p.add_argument("--warm", action="store_true", help="w1: measure the process's second run")
    a = p.parse_args()
    a.build_command = f"uv run python benchmarks/drv_plait.py build --db {a.db}"
    if a.workload == "w2" and not Path(a.db).is_file():  # opening it would make an empty store
        raise SystemExit(f"{a.db} does not exist; build it first: {a.build_command}")
    res: dict[str, Any] = {
        "peer": "plait",
        "version": f"plait {plait.__version__} / sqlite {sqlite3.sqlite_version}",
        "workload": a.workload,
        "import_s": round(T_IMPORTED - T_IMPORT_START, 4),
        "persistence": "SqliteStore: WAL, synchronous=FULL, 1 txn per step (assistant "
        "message + run state + execution records, with the last tool result when the "
        "model answered without suspending)",
    }
    asyncio.run({"w1": w1, "build": build, "w2": w2}[a.workload](a, res))
    res["peak_rss_mb"] = round(peak_rss_mb(), 1)
    res["process_wall_s"] = round(time.perf_counter() - T_PROCESS_START, 3)
    print(json.dumps(res), flush=True)


if __name__ == "__main__":
    main()
