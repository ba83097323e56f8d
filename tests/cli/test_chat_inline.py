"""``plait chat`` answering a run that waits for a person, in process (the terminal
itself is covered by test_chat_tmux.py): a side effect whose outcome is unknown after a
crash is asked about inline, resolved, and the run continues to its end."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from plait.adapters.stores.sqlite.store import SqliteStore
from plait.adapters.system import RandomIds, SystemClock
from plait.application.ports import ModelRequest, ModelResponse, RawToolCall
from plait.application.service import AgentService
from plait.domain.messages import ToolResultMessage
from plait.domain.runs import Budget, RunStatus
from plait.domain.tools import EffectClass
from plait.entrypoints.cli.chat import _Chat
from plait.runtime import Runtime
from plait.testing import FunctionModel, RecordingTool
from tests.application.conftest import spec


class Died(BaseException):
    """Stands for the process dying at a checkpoint."""


def _die_after_the_tool(point: str) -> None:
    if point == "tool_returned":
        raise Died(point)


async def _appends(request: ModelRequest) -> ModelResponse:
    if isinstance(request.context.items[-1], ToolResultMessage):
        return ModelResponse(text="done after the resolution")
    call = RawToolCall(id="c_append", name="append", arguments={"text": "deployed"})
    return ModelResponse(text="appending", tool_calls=(call,))


Stranded = tuple[Runtime, str, str, RecordingTool]


@pytest.fixture
def stranded(crashed: Stranded) -> Stranded:
    """``crashed``, recovered by this "process" as ``awaiting_resolution``."""
    rt, _, run_id, _ = crashed
    while asyncio.run(rt.queries.live_leases(run_id=run_id)):
        time.sleep(0.05)  # the dead process's lease runs out
    asyncio.run(rt.service.recover(run_id=run_id))
    return crashed


@pytest.fixture
def crashed(tmp_path: Path) -> Iterator[Stranded]:
    """A run whose process died right after its side effect ran (still ``running`` in
    the store): (runtime, session, run, the tool)."""
    path = tmp_path / "chat.db"
    tool = RecordingTool(spec("append", EffectClass.SIDE_EFFECT), output="appended")
    model = FunctionModel(_appends, name="behaviour")

    async def strand() -> tuple[str, str]:
        store = SqliteStore.open(path)
        try:
            service = AgentService.build(
                store=store, artifacts=store, model=model, tools=[tool.tool],
                clock=SystemClock(), ids=RandomIds(), owner="dead", lease_seconds=0.2,
                checkpoint=_die_after_the_tool,
            )  # fmt: skip
            session = await service.create_session()
            with pytest.raises(Died):
                await service.send(session.id, "deploy it")
            (run,) = await store.list_runs(session_id=session.id)
            return session.id, run.id
        finally:
            await store.close()

    session_id, run_id = asyncio.run(strand())
    rt = Runtime.open(db=f"sqlite:///{path}", model=model, tools=[tool.tool])
    try:
        yield rt, session_id, run_id, tool
    finally:
        asyncio.run(rt.close())


def _answering(chat: _Chat, answers: list[str], monkeypatch: pytest.MonkeyPatch) -> list[str]:
    asked: list[str] = []

    def answer(prompt: str, **_: Any) -> str:
        asked.append(prompt)
        return answers.pop(0)

    monkeypatch.setattr(chat.console, "input", answer)
    return asked


def test_chat_resolves_an_unknown_outcome_inline_and_continues(
    stranded: Stranded, monkeypatch: pytest.MonkeyPatch
) -> None:
    rt, session_id, run_id, tool = stranded
    chat = _Chat(rt, session_id, Budget())
    waiting = chat.waiting_run()
    assert waiting is not None and waiting.status is RunStatus.AWAITING_RESOLUTION
    asked = _answering(chat, ["maybe", "s", "the line is in the file"], monkeypatch)
    chat.settle(waiting)
    assert len(asked) == 3  # "maybe" is not an answer: asked again, then the note
    assert "what happened" in asked[0] and "what happened" in asked[1]
    run = asyncio.run(rt.queries.get_run(run_id))
    assert run.status is RunStatus.COMPLETED
    history = [sm.message for sm in asyncio.run(rt.queries.history(session_id))]
    result = history[2]
    assert isinstance(result, ToolResultMessage)
    assert result.result.status.value == "succeeded"
    assert result.result.content.startswith("the line is in the file")
    assert getattr(history[-1], "text", None) == "done after the resolution"
    assert len(tool.calls) == 1  # never run again


def test_leaving_the_question_keeps_the_run_waiting(
    stranded: Stranded, monkeypatch: pytest.MonkeyPatch
) -> None:
    rt, session_id, run_id, _ = stranded
    chat = _Chat(rt, session_id, Budget())

    def leave(prompt: str, **_: Any) -> str:
        raise KeyboardInterrupt

    monkeypatch.setattr(chat.console, "input", leave)
    chat.settle(chat.waiting_run())
    assert asyncio.run(rt.queries.get_run(run_id)).status is RunStatus.AWAITING_RESOLUTION


def test_interrupted_reads_back_a_run_left_running_and_asks_about_its_side_effect(
    crashed: Stranded, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Ctrl-C left the run ``running`` in the store while its side effect had started
    (the task died before anything more was written): the chat takes the run back as
    ``awaiting_resolution`` (not "cancelled, not executed": it may have acted), says
    so, asks what happened, and the run continues."""
    rt, session_id, run_id, tool = crashed
    chat = _Chat(rt, session_id, Budget())
    run = chat.interrupted(None, frozenset())
    assert run is not None and run.id == run_id
    assert run.status is RunStatus.AWAITING_RESOLUTION
    assert f"interrupted: run {run_id} is awaiting_resolution" in capsys.readouterr().out
    _answering(chat, ["f", "nothing was appended"], monkeypatch)
    chat.settle(run)
    assert asyncio.run(rt.queries.get_run(run_id)).status is RunStatus.COMPLETED
    history = [sm.message for sm in asyncio.run(rt.queries.history(session_id))]
    result = history[2]
    assert isinstance(result, ToolResultMessage) and result.result.status.value == "failed"
    assert len(tool.calls) == 1
