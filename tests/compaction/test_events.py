"""Compaction events reach every surface: the persisted run events a worker writes (what
SSE streams), ``send --events`` JSON lines, and the terminal progress lines."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from plait.application.events import CompactionEvent
from plait.application.worker import Worker
from plait.domain.runs import RunStatus
from plait.domain.service import EventType
from plait.entrypoints.http.events import encode_event, sse_frame
from tests.compaction.test_loop import echo_turns, scripted, service, summaries


def test_a_worker_persists_compaction_events_for_sse() -> None:
    model = scripted(echo_turns(10), summaries(4))

    async def go() -> None:
        agent, store = service(model)
        session = await agent.create_session(owner="ana")
        queued = await agent.submit(session.id, "Echo a lot, please.")
        worker = Worker(service=agent, queue=store, encode=encode_event, poll_seconds=0.01)
        stop = asyncio.Event()
        task = asyncio.create_task(worker.run(stop))
        async with asyncio.timeout(10):
            while not (await store.get_run(queued.id)).status.terminal:  # noqa: ASYNC110
                await asyncio.sleep(0.01)
        stop.set()
        await task
        assert (await store.get_run(queued.id)).status is RunStatus.COMPLETED
        events = await store.read_run_events(queued.id)
        compactions = [e for e in events if e.type is EventType.COMPACTION]
        phases = [e.data["phase"] for e in compactions]
        assert phases[:2] == ["started", "activated"]
        activated = compactions[1]
        assert activated.data["trigger"] == "pressure"
        assert activated.data["generation"] == 1
        assert activated.data["tokens_after"] < activated.data["tokens_before"]
        frame = sse_frame(activated)
        assert frame.startswith(f"id: {activated.seq}\nevent: compaction\n")
        payload = json.loads(frame.split("data: ", 1)[1])
        assert payload["phase"] == "activated" and payload["run_id"] == queued.id

    asyncio.run(go())


def _event(**kw: Any) -> CompactionEvent:
    base: dict[str, Any] = {"run_id": "r1", "phase": "failed", "trigger": "overflow", "step": 4}
    return CompactionEvent(**(base | kw))


def test_send_events_prints_compaction_lines(capsys: pytest.CaptureFixture[str]) -> None:
    from plait.entrypoints.cli._live import json_lines

    json_lines(_event(detail="the summarizer gave no valid summary"))
    line = json.loads(capsys.readouterr().out)
    assert line["event"] == "compaction" and line["phase"] == "failed"
    assert line["detail"] == "the summarizer gave no valid summary" and line["step"] == 4


def test_the_terminal_shows_a_compaction_with_its_reason() -> None:
    from rich.console import Console

    from plait.entrypoints.cli._live import terminal_progress

    console = Console(record=True, width=200, force_terminal=False)
    with terminal_progress(console) as progress:
        progress(_event(phase="started", trigger="pressure"))
        progress(_event(phase="skipped", trigger="pressure", detail="nothing can be compacted"))
    text = console.export_text()
    assert "compaction skipped" in text and "nothing can be compacted" in text
