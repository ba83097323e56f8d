"""Poison input from the model never wedges a run (issue 20, item 5), on every store: a
NUL or a lone surrogate in a call id or an argument, or an argument too large to run, is
a correction the model reads; a gate that raises fails its call; a legacy call holding
such input is settled on recovery; an unexpected error fails the run with every call
paired. And a property test throws generated strings at call ids and arguments."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import plait.application.driver as driver_module
from plait.adapters.stores import Store
from plait.adapters.stores.jsonl.store import JsonlStore
from plait.adapters.stores.memory.store import MemoryStore
from plait.adapters.stores.postgres.store import PostgresStore
from plait.adapters.stores.sqlite.store import SqliteStore
from plait.adapters.tools import workspace_tools
from plait.adapters.tools.command import command_tools
from plait.application.gate import GateDecision, GateRequest, ToolGate
from plait.application.ports import ModelRequest, ModelResponse, RawToolCall
from plait.application.service import AgentService
from plait.application.validation import CheckedOutput, check_output
from plait.domain.context import Correction
from plait.domain.messages import AssistantMessage, ToolResultMessage, ToolStatus
from plait.domain.runs import RunStatus
from plait.domain.session import Session
from plait.runtime import governed_gate
from plait.testing import FixedClock, FunctionModel, SequentialIds
from tests.pg import empty_database

STORES = ["memory", "jsonl", "sqlite", "postgres"]


def open_store(kind: str, tmp: Path, request: pytest.FixtureRequest) -> Store:
    if kind == "memory":
        return MemoryStore()
    if kind == "jsonl":
        return JsonlStore(tmp / "jsonl")
    if kind == "sqlite":
        return SqliteStore.open(tmp / "db" / "plait.db")
    url: str = request.getfixturevalue("pg_url")
    empty_database(url)
    return PostgresStore(url)


@pytest.fixture(params=STORES)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    s = open_store(request.param, tmp_path, request)
    yield s
    asyncio.run(s.close())


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.txt").write_text("alpha\n", encoding="utf-8")
    return ws


Turn = ModelResponse | Callable[[ModelRequest], ModelResponse]


class Model:
    """Answers from a list of turns, then ``done``; keeps every request."""

    def __init__(self, turns: list[Turn]) -> None:
        self.turns = turns
        self.requests: list[ModelRequest] = []

    async def __call__(self, request: ModelRequest) -> ModelResponse:
        self.requests.append(request)
        if not self.turns:
            return ModelResponse(text="done")
        turn = self.turns.pop(0)
        return turn(request) if callable(turn) else turn

    def corrections(self) -> list[Correction]:
        """Every correction the model was shown (a request carries the step's so far)."""
        seen: list[Correction] = []
        for r in self.requests:
            seen += [c for c in r.context.corrections if c not in seen]
        return seen


def calls(*raw: RawToolCall, text: str = "") -> ModelResponse:
    return ModelResponse(text=text, tool_calls=raw)


def service(
    store: Store,
    model: Model,
    *,
    gate: ToolGate | None = None,
    clock: FixedClock | None = None,
    owner: str = "worker-1",
    start: int = 1,
) -> AgentService:
    clock = clock or FixedClock()
    ids = SequentialIds(start=start)
    fn = FunctionModel(model, name="fn")
    return AgentService.build(
        store=store, artifacts=store, model=fn, tools=[*workspace_tools(), *command_tools()],
        clock=clock, ids=ids, owner=owner,
        gate=gate or governed_gate(None, store, clock, ids, fn),
    )  # fmt: skip


def new_session(store: Store, workspace: Path, sid: str = "s1") -> str:
    asyncio.run(store.create_session(Session(id=sid, created_at=1.0, workspace=str(workspace))))
    return sid


def assert_settled(store: Store, sid: str) -> list[ToolResultMessage]:
    """No run of the session is left unfinished and every call has a result."""

    async def go() -> tuple[list[Any], list[Any]]:
        runs = await store.list_runs(session_id=sid)
        return runs, [m.message for m in await store.read_messages(sid)]

    runs, history = asyncio.run(go())
    for r in runs:
        assert r.status.terminal or r.status is RunStatus.AWAITING_RESOLUTION, r
    asked = [c.id for m in history if isinstance(m, AssistantMessage) for c in m.tool_calls]
    results = [m for m in history if isinstance(m, ToolResultMessage)]
    assert sorted(asked) == sorted(m.result.call_id for m in results)
    return results


# --- boundary validation: the model is told exactly what is wrong -------------------------------


@pytest.mark.parametrize(
    ("tool", "arguments", "said"),
    [
        ("read_file", {"path": "a\x00b"}, "$.path contains a NUL character at offset 1"),
        ("run_command", {"command": "ls", "cwd": "sub\x00dir"}, "$.cwd contains a NUL"),
        ("read_file", {"path": "a\udcffb"}, "$.path contains a lone surrogate \\udcff"),
    ],
    ids=["nul_in_path", "nul_in_cwd", "surrogate_in_path"],
)
def test_poisoned_argument_is_a_correction_not_a_wedged_run(
    store: Store, workspace: Path, tool: str, arguments: dict[str, Any], said: str
) -> None:
    model = Model(
        [
            calls(RawToolCall(id="c1", name=tool, arguments=arguments)),
            calls(RawToolCall(id="c2", name="read_file", arguments={"path": "a.txt"})),
        ]
    )
    sid = new_session(store, workspace)
    result = asyncio.run(service(store, model).send(sid, "read it"))
    assert result.run.status is RunStatus.COMPLETED
    [correction] = model.corrections()
    assert any(said in p for p in correction.problems), correction.problems
    results = assert_settled(store, sid)
    assert [(m.result.call_id, m.result.status) for m in results] == [("c2", ToolStatus.SUCCEEDED)]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("call_id", "said"),
    [
        ("c\udcff1", "contains a lone surrogate \\udcff at offset 1"),
        ("c\x001", "contains a NUL character at offset 1"),
        ("c\x1b1", "contains a control character \\x1b at offset 1"),
        ("c" * 201, "is 201 characters long (at most 200)"),
    ],
    ids=["surrogate_in_call_id", "nul_in_call_id", "escape_in_call_id", "huge_call_id"],
)
def test_poisoned_call_id_is_a_correction_not_a_wedged_run(
    store: Store, workspace: Path, call_id: str, said: str
) -> None:
    model = Model(
        [
            calls(RawToolCall(id=call_id, name="read_file", arguments={"path": "a.txt"})),
            calls(RawToolCall(id="c2", name="read_file", arguments={"path": "a.txt"})),
        ]
    )
    sid = new_session(store, workspace)
    result = asyncio.run(service(store, model).send(sid, "read it"))
    assert result.run.status is RunStatus.COMPLETED
    [correction] = model.corrections()
    assert any(said in p for p in correction.problems), correction.problems
    # what the model is shown of its rejected output can be sent and stored
    correction.rejected_text.encode("utf-8")
    assert "\x00" not in correction.rejected_text
    assert [m.result.call_id for m in assert_settled(store, sid)] == ["c2"]


@pytest.mark.slow
def test_nul_in_the_answer_text_is_a_correction(store: Store, workspace: Path) -> None:
    model = Model([ModelResponse(text="bad\x00text"), ModelResponse(text="fine")])
    sid = new_session(store, workspace)
    result = asyncio.run(service(store, model).send(sid, "say it"))
    assert result.run.status is RunStatus.COMPLETED
    [correction] = model.corrections()
    assert correction.problems == ("the message text contains a NUL character at offset 3",)
    assert_settled(store, sid)


def test_a_135_kb_command_is_a_correction_not_an_unknown_call(
    store: Store, workspace: Path
) -> None:
    """E2BIG: the attack's 135 KB command was marked ``unknown`` though nothing ran. The
    schema caps a command below what one exec argument may hold: the model is told."""
    big = "echo " + "x" * 135_000
    model = Model(
        [
            calls(RawToolCall(id="c1", name="run_command", arguments={"command": big})),
            calls(RawToolCall(id="c2", name="read_file", arguments={"path": "a.txt"})),
        ]
    )
    sid = new_session(store, workspace)
    result = asyncio.run(service(store, model).send(sid, "run it"))
    assert result.run.status is RunStatus.COMPLETED
    [correction] = model.corrections()
    assert any("$.command: expected at most 32000 characters" in p for p in correction.problems), (
        correction.problems
    )
    assert [m.result.call_id for m in assert_settled(store, sid)] == ["c2"]


def test_arguments_over_the_size_limit_are_a_correction() -> None:
    from plait.domain.text import MAX_ARGUMENTS_BYTES

    specs = {t.spec.name: t.spec for t in workspace_tools()}
    huge = '{"path": "' + "a" * MAX_ARGUMENTS_BYTES + '"}'
    checked: CheckedOutput = check_output(
        calls(RawToolCall(id="c1", name="read_file", arguments=huge)), specs, set()
    )
    assert not checked.ok and "at most 1000000 bytes of JSON" in checked.problems[0]
    # Fewer characters than the limit, more bytes of UTF-8 (3 per euro sign).
    wide = '{"path": "' + "\u20ac" * (MAX_ARGUMENTS_BYTES // 3 + 1) + '"}'
    assert len(wide) < MAX_ARGUMENTS_BYTES
    checked = check_output(
        calls(RawToolCall(id="c1", name="read_file", arguments=wide)), specs, set()
    )
    assert not checked.ok
    assert "1000014 bytes of JSON (at most 1000000)" in checked.problems[0], checked.problems


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ('{"path": "a\\u0000b"}', "$.path contains a NUL character at offset 1"),
        ('{"path": "a\\udcffb"}', "$.path contains a lone surrogate \\udcff at offset 1"),
        ('{"path": "a\\ud800"}', "$.path contains a lone surrogate \\ud800 at offset 1"),
        ('{"pa\\u0000th": "a"}', "key 'pa\\x00th' of $ contains a NUL character"),
        ('{"path": "a\udcffb"}', "$.path contains a lone surrogate \\udcff at offset 1"),
        ('{"path": "a\udcffb", "x": "\\n"}', "$.path contains a lone surrogate"),
    ],
    ids=["nul_escape", "surrogate_escape", "high_escape", "nul_in_key", "raw_surrogate", "both"],
)
def test_poison_in_json_text_arguments_is_found_however_it_is_written(text: str, said: str) -> None:
    """Arguments sent as JSON text (as every provider sends them): a NUL or a lone
    surrogate written as a ``\\u`` escape, or as itself, is refused with where it is."""
    specs = {t.spec.name: t.spec for t in workspace_tools()}
    checked = check_output(
        calls(RawToolCall(id="c1", name="read_file", arguments=text)), specs, set()
    )
    assert not checked.ok and not checked.calls
    assert any(said in p for p in checked.problems), checked.problems


@pytest.mark.parametrize(
    "text",
    [
        '{"path": "a.txt"}',
        '{"path": "caf\u00e9 \U0001f600.txt"}',
        '{"path": "caf\\u00e9 \\ud83d\\ude00.txt"}',  # a surrogate pair: one character
        '{"path": "a\\\\u0000b"}',  # an escaped backslash, then "u0000": plain text
        '{"path": "line\\nbreak\\ttab"}',
    ],
    ids=["ascii", "non_ascii", "escaped_pair", "escaped_backslash", "simple_escapes"],
)
def test_clean_json_text_arguments_are_accepted_as_written(text: str) -> None:
    specs = {t.spec.name: t.spec for t in workspace_tools()}
    checked = check_output(
        calls(RawToolCall(id="c1", name="read_file", arguments=text)), specs, set()
    )
    assert checked.ok, checked.problems
    [call] = checked.calls
    assert call.arguments_json == text
    assert call.arguments() == json.loads(text)


def test_tool_output_with_a_lone_surrogate_is_stored_escaped(store: Store, workspace: Path) -> None:
    """A tool that returns undecodable bytes kept as surrogates: the result could not be
    written, and the run stayed ``running``."""
    from plait.domain.tools import EffectClass, ToolSpec
    from plait.testing import RecordingTool

    spec = ToolSpec(
        name="dump", description="dump", effect=EffectClass.READ_ONLY,
        parameters={"type": "object", "properties": {}},
    )  # fmt: skip
    dump = RecordingTool(spec, output="caf\udce9 ok")
    model = Model([calls(RawToolCall(id="c1", name="dump", arguments={}))])
    sid = new_session(store, workspace)
    clock, ids = FixedClock(), SequentialIds()
    fn = FunctionModel(model, name="fn")
    svc = AgentService.build(
        store=store, artifacts=store, model=fn, tools=[dump.tool], clock=clock, ids=ids,
        owner="w",
    )  # fmt: skip
    result = asyncio.run(svc.send(sid, "dump it"))
    assert result.run.status is RunStatus.COMPLETED
    [settled] = assert_settled(store, sid)
    assert settled.result.content == "caf\\udce9 ok"


# --- a gate that raises, a legacy poisoned call, an unexpected error ----------------------------


class RaisingGate:
    async def decide(self, request: GateRequest) -> GateDecision:
        raise ValueError("embedded null byte")


def test_a_gate_that_raises_fails_its_call_and_the_run_goes_on(
    store: Store, workspace: Path
) -> None:
    model = Model([calls(RawToolCall(id="c1", name="read_file", arguments={"path": "a.txt"}))])
    sid = new_session(store, workspace)
    result = asyncio.run(service(store, model, gate=RaisingGate()).send(sid, "read it"))
    assert result.run.status is RunStatus.COMPLETED
    [settled] = assert_settled(store, sid)
    assert settled.result.status is ToolStatus.FAILED
    assert settled.result.reason == (
        "the tool gate could not decide about this call (ValueError: embedded null byte); "
        "it was not executed"
    )


class Died(BaseException):
    """The process dying right after the poisoned call was stored."""


def _permissive(response: ModelResponse, tools: Any, used: Any) -> CheckedOutput:
    """The model-output check as it was before poison input was refused (legacy data)."""
    from plait.domain.messages import ToolCall

    return CheckedOutput(
        tuple(ToolCall.create(id=c.id or "", name=c.name, arguments=c.arguments)  # type: ignore[arg-type]
              for c in response.tool_calls),
        (),
    )  # fmt: skip


def legacy_poisoned_run(
    store: Store, workspace: Path, monkeypatch: pytest.MonkeyPatch, clock: FixedClock,
    argument: str,
) -> str:  # fmt: skip
    """A session whose run holds a call with a NUL in ``path`` (or ``cwd``), stored by a
    plait before this check, whose process then died; the lease has expired."""
    arguments = {"path": "a\x00b"} if argument == "path" else {"command": "ls", "cwd": "s\x00b"}
    name = "read_file" if argument == "path" else "run_command"
    sid = new_session(store, workspace)
    first = service(store, Model([calls(RawToolCall(id="c1", name=name, arguments=arguments))]),
                    clock=clock)  # fmt: skip

    def die(point: str) -> None:
        if point == "assistant_saved":
            raise Died(point)

    first.journal._checkpoint = die
    with monkeypatch.context() as patch:
        patch.setattr(driver_module, "check_output", _permissive)
        with pytest.raises(Died):
            asyncio.run(first.send(sid, "go"))
    clock.advance(120)  # the dead owner's lease expired
    return sid


@pytest.mark.slow
@pytest.mark.parametrize("argument", ["path", "cwd"])
def test_recover_settles_a_legacy_call_with_nul_in_a_path_as_failed(
    store: Store, workspace: Path, monkeypatch: pytest.MonkeyPatch, argument: str
) -> None:
    """``runs recover`` crashed on a run holding a call with a NUL in ``path`` (stored by
    a plait before this check): the real gate's path probe raised ``ValueError``."""
    clock = FixedClock()
    sid = legacy_poisoned_run(store, workspace, monkeypatch, clock, argument)
    second = service(store, Model([]), clock=clock, owner="worker-2", start=1000)
    [report] = asyncio.run(second.recover())
    assert report.outcome == "resumed", report
    assert report.result is not None and report.result.run.status is RunStatus.COMPLETED
    [settled] = assert_settled(store, sid)
    assert settled.result.status is ToolStatus.FAILED
    assert "embedded null byte" in (settled.result.reason or "")


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["memory", "sqlite", "postgres"])
def test_serve_worker_settles_a_legacy_poisoned_run_instead_of_reclaiming_it_forever(
    kind: str, tmp_path: Path, workspace: Path, monkeypatch: pytest.MonkeyPatch,
    request: pytest.FixtureRequest,
) -> None:  # fmt: skip
    """``serve``'s worker took the run over at every lease expiry, crashed the same way
    each time, and never said so."""
    from plait.application.worker import Worker
    from plait.entrypoints.http.events import encode_event

    store = open_store(kind, tmp_path, request)
    clock = FixedClock()
    sid = legacy_poisoned_run(store, workspace, monkeypatch, clock, "path")
    svc = service(store, Model([]), clock=clock, owner="worker-2", start=1000)

    async def go() -> RunStatus:
        worker = Worker(service=svc, queue=store, encode=encode_event, poll_seconds=0.01)  # type: ignore[arg-type]
        stop = asyncio.Event()
        task = asyncio.create_task(worker.run(stop))
        try:
            async with asyncio.timeout(30):
                while True:
                    [run] = await store.list_runs(session_id=sid)
                    if run.status.terminal:
                        return run.status
                    await asyncio.sleep(0.02)
        finally:
            stop.set()
            await task

    try:
        assert asyncio.run(go()) is RunStatus.COMPLETED
        [settled] = assert_settled(store, sid)
        assert settled.result.status is ToolStatus.FAILED
    finally:
        asyncio.run(store.close())


def test_an_unexpected_error_fails_the_run_with_every_call_paired(
    store: Store, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before, any exception but the run's own stop signals left the run ``running``
    with its lease: a worker re-claimed it every lease, forever."""
    model = Model(
        [
            calls(
                RawToolCall(id="c1", name="read_file", arguments={"path": "a.txt"}),
                RawToolCall(id="c2", name="read_file", arguments={"path": "a.txt"}),
            )
        ]
    )
    sid = new_session(store, workspace)
    svc = service(store, model)
    real = svc.driver._call
    seen: list[str] = []

    async def broken(a: Any, call: Any, record: Any) -> None:
        seen.append(call.id)
        if call.id == "c2":
            raise RuntimeError("a bug")
        await real(a, call, record)

    monkeypatch.setattr(svc.driver, "_call", broken)
    result = asyncio.run(svc.send(sid, "read it"))
    assert result.run.status is RunStatus.FAILED
    assert result.run.error is not None
    assert (result.run.error.code, result.run.error.message) == (
        "internal_error",
        "internal error: RuntimeError: a bug",
    )
    results = assert_settled(store, sid)
    assert [(m.result.call_id, m.result.status) for m in results] == [
        ("c1", ToolStatus.SUCCEEDED),
        ("c2", ToolStatus.FAILED),
    ]
    assert asyncio.run(store.get_session(sid)).active_run_id is None


# --- the property: generated poison at call ids and arguments -----------------------------------

POISON = st.sampled_from(
    ["\x00", "\ud800", "\udcff", "\udfff", "\x07", "\x1b", "\x7f", "\x85", "\n", "\t",
     "\u2028", "\ufeff", "\U0001f600", "é", "a", "/", "..", "\\", '"', "'", "{", "$("]
)  # fmt: skip
POISONED = st.tuples(
    st.one_of(
        st.lists(POISON, max_size=30).map("".join),
        st.text(st.characters(codec=None, exclude_categories=()), max_size=30),
    ),
    st.sampled_from([1, 1000, 40_000, 300_000]),
)
"""(piece, times): the string is the piece repeated (small to report, large to send)."""
TARGETS = ["call_id", "path", "content", "key", "raw_arguments", "text", "name"]


def _poisoned_turn(target: str, value: str) -> ModelResponse:
    if target == "call_id":
        return calls(RawToolCall(id=value, name="read_file", arguments={"path": "a.txt"}))
    if target == "path":
        return calls(RawToolCall(id="c1", name="list_dir", arguments={"path": value}))
    if target == "content":
        args = {"path": "out.txt", "content": value}
        return calls(RawToolCall(id="c1", name="write_file", arguments=args))
    if target == "key":
        return calls(RawToolCall(id="c1", name="read_file", arguments={"path": "a.txt", value: 1}))
    if target == "raw_arguments":
        raw = '{"path": "' + value + '"}'
        return calls(RawToolCall(id="c1", name="read_file", arguments=raw))
    if target == "name":
        return calls(RawToolCall(id="c1", name=value, arguments={}))
    return ModelResponse(text=value)


@pytest.mark.slow
@pytest.mark.parametrize("kind", STORES)
def test_generated_poison_in_call_ids_and_arguments_never_wedges_a_run(
    kind: str, tmp_path: Path, workspace: Path, request: pytest.FixtureRequest,
    caplog: pytest.LogCaptureFixture,
) -> None:  # fmt: skip
    store = open_store(kind, tmp_path, request)
    seq = iter(range(1_000_000))

    @given(target=st.sampled_from(TARGETS), value=POISONED)
    @settings(
        max_examples=60, deadline=None, database=None,
        suppress_health_check=list(HealthCheck),
    )  # fmt: skip
    def check(target: str, value: tuple[str, int]) -> None:
        piece, times = value
        n = next(seq)
        sid = new_session(store, workspace, f"s{n}")
        model = Model([_poisoned_turn(target, piece * times)])
        svc = service(store, model, start=1_000 * (n + 1))
        caplog.clear()
        result = asyncio.run(svc.send(sid, "go"))
        assert result.run.status in (RunStatus.COMPLETED, RunStatus.FAILED), result.run
        if result.run.status is RunStatus.FAILED:  # corrections ran out: a clear error
            assert result.run.error is not None
            assert result.run.error.code == "invalid_model_output", result.run.error
        assert_settled(store, sid)
        tracebacks = [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]
        assert not tracebacks, [r.getMessage() for r in tracebacks]

    try:
        check()
    finally:
        asyncio.run(store.close())
