"""A session remembers its model (issue 26 item 4): ``sessions new --model`` or its first
``send`` sets it; ``send``, ``chat``, ``context``, ``compact``, ``runs recover`` and ``runs
resume`` use it without ``--model``; ``--model`` overrides it for one run. ``sessions new``
and ``chat`` default to the same workspace; the Python API refuses a missing workspace."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from plait.adapters.stores import open_store
from plait.adapters.system import RandomIds
from plait.adapters.tools import workspace_tools
from plait.application.service import AgentService
from plait.domain.errors import ConfigError
from plait.domain.runs import Budget
from plait.runtime import Runtime
from plait.testing import FixedClock, ScriptedModel
from tests.cli.conftest import Plait, call, write_script


def _script(name: str, replies: int = 4) -> dict[str, Any]:
    return {
        "version": 1,
        "model": name,
        "capabilities": {"context_window": 100_000, "max_output_tokens": 500},
        "assistant": [{"text": f"{name} answers {n}."} for n in range(replies)],
    }


@pytest.fixture
def first(tmp_path: Path) -> str:
    return write_script(tmp_path, "first", _script("first"))


@pytest.fixture
def other(tmp_path: Path) -> str:
    return write_script(tmp_path, "other", _script("other"))


def _models(plait: Plait, session_id: str) -> list[str]:
    runs = plait.json("runs", "list", "--session", session_id)["runs"]
    return [r["model"].removeprefix("scripted:") for r in reversed(runs)]


def test_sessions_new_model_is_used_by_send_and_overridden_for_one_run(
    plait: Plait, workspace: Path, first: str, other: str
) -> None:
    created = plait.json("sessions", "new", "--workspace", str(workspace), "--model", first)
    assert created["model"] == first
    sid = created["session_id"]
    plait.ok("send", sid, "hello")  # no --model, no PLAIT_MODEL: the session's
    plait.ok("send", sid, "again", "--model", other)  # this run only
    plait.ok("send", sid, "and again")
    assert _models(plait, sid) == ["first", "other", "first"]
    assert plait.json("sessions", "list")["sessions"][0]["model"] == first


def test_the_first_send_sets_the_model_and_beats_the_environment(
    plait: Plait, workspace: Path, first: str, other: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    sid = plait.new_session(workspace)
    plait.ok("send", sid, "hello", "--model", first)
    monkeypatch.setenv("PLAIT_MODEL", other)  # the default for new sessions only
    plait.ok("send", sid, "again")
    assert _models(plait, sid) == ["first", "first"]
    fresh = plait.new_session(workspace)
    plait.ok("send", fresh, "hi")
    assert _models(plait, fresh) == ["other"]


def test_a_session_that_never_ran_has_no_model_to_remember(plait: Plait, workspace: Path) -> None:
    sid = plait.new_session(workspace)
    r = plait("send", sid, "hi", "--json")
    assert r.code == 2 and r.json["error"]["code"] == "config_error"
    assert r.json["error"]["message"].startswith("no model chosen: pass --model")
    assert plait.json("runs", "list", "--session", sid)["runs"] == []


def test_context_and_compact_use_the_sessions_model(
    plait: Plait, workspace: Path, first: str
) -> None:
    sid = plait.new_session(workspace)
    no_model = plait("context", sid, "--json")
    assert no_model.code == 2 and "remembers none" in no_model.json["error"]["message"]
    plait.ok("send", sid, "hello", "--model", first)
    view = plait.json("context", sid)
    assert view["model"] == "scripted:first"
    compacted = plait("compact", sid, "--json")
    assert compacted.code in (0, 1), compacted.err
    assert "no model chosen" not in compacted.out + compacted.err


def test_chat_uses_the_sessions_model(
    plait: Plait, workspace: Path, first: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    sid = plait.json("sessions", "new", "--workspace", str(workspace), "--model", first)[
        "session_id"
    ]
    monkeypatch.setattr("sys.stdin", _Lines('{"text": "hello"}\n'))
    r = plait("chat", "--session", sid, "--json")
    assert r.code == 0, (r.out, r.err)
    assert _models(plait, sid) == ["first"]


class _Lines:
    """Standard input holding ``text`` (not a terminal)."""

    def __init__(self, text: str) -> None:
        import io

        self._io = io.StringIO(text)
        self.buffer = io.BytesIO(text.encode())

    def isatty(self) -> bool:
        return False

    def readline(self) -> str:
        return self._io.readline()

    def __iter__(self) -> Any:
        return iter(self._io)

    def read(self, size: int = -1) -> str:
        return self._io.read(size)


class _Died(BaseException):
    pass


def test_runs_recover_and_resume_use_the_sessions_model(
    plait: Plait, workspace: Path, tmp_path: Path
) -> None:
    """A run started through the Python API records no model spec; the session created
    with ``--model`` says which model continues it."""
    script = {
        "version": 1,
        "model": "recovery",
        "assistant": [
            {
                "text": "Writing.",
                "tool_calls": [call("write_file", "c1", path="out.txt", content="x\n")],
            },
            {"text": "Done."},
        ],
    }
    spec = write_script(tmp_path, "recovery", script)
    sid = plait.json("sessions", "new", "--workspace", str(workspace), "--model", spec)[
        "session_id"
    ]
    run_id = _crash(plait.db, sid, spec)
    recovered = plait("runs", "recover", "--run", run_id, "--json")
    assert recovered.code == 1, (recovered.out, recovered.err)  # the write's outcome is unknown
    assert recovered.json["recoveries"][0]["run"]["status"] == "awaiting_resolution"
    plait.ok("runs", "resolve", run_id, "--call", "c1", "--status", "succeeded", "--note", "ok")
    resumed = plait("runs", "resume", run_id, "--json")
    assert resumed.code == 0, (resumed.out, resumed.err)
    assert resumed.json["status"] == "completed"


def _crash(url: str, session_id: str, spec: str) -> str:
    def hook(name: str) -> None:
        if name == "tool_returned":
            raise _Died(name)

    async def go() -> str:
        store = open_store(url)
        try:
            service = AgentService.build(
                store=store,
                artifacts=store,
                model=ScriptedModel.from_file(spec.removeprefix("scripted:")),
                tools=workspace_tools(),
                clock=FixedClock(),
                ids=RandomIds(),
                owner="dead-worker",
                checkpoint=hook,
                budget=Budget(deadline_seconds=None),
            )
            with pytest.raises(_Died):
                await service.send(session_id, "please write out.txt")
            (run,) = await store.list_runs(session_id=session_id)
            assert run.model_spec is None
            return run.id
        finally:
            await store.close()

    return asyncio.run(go())


def test_sessions_new_and_chat_default_to_the_current_directory(
    plait: Plait, tmp_path: Path
) -> None:
    created = plait.json("sessions", "new")
    assert created["workspace"] == str(tmp_path.resolve())


def test_the_python_api_refuses_a_missing_workspace(tmp_path: Path) -> None:
    resolved = str(tmp_path.resolve())

    async def go() -> None:
        runtime = Runtime.open(db="memory://")
        try:
            with pytest.raises(ConfigError, match="not an existing directory"):
                await runtime.service.create_session(workspace=str(tmp_path / "nope"))
            assert await runtime.queries.list_sessions() == []
            made = await runtime.service.create_session(workspace=str(tmp_path))
            assert made.workspace == resolved
        finally:
            await runtime.close()

    asyncio.run(go())


def test_the_model_survives_every_store(tmp_path: Path) -> None:
    async def go(url: str) -> None:
        runtime = Runtime.open(db=url)
        try:
            made = await runtime.service.create_session(model="scripted:x.json")
            again = await runtime.queries.get_session(made.id)
            assert again.model == "scripted:x.json"
            assert await runtime.queries.session_model(made.id) == "scripted:x.json"
        finally:
            await runtime.close()

    for url in (
        "memory://",
        f"sqlite:///{tmp_path / 's.db'}",
        f"jsonl:///{tmp_path / 'j'}",
    ):
        asyncio.run(go(url))
