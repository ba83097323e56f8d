"""Compaction of a run that another process takes over (an attack found both): a run
killed at the start of a compaction and recovered by a process opened without a model
(``plait runs recover`` without ``--model``) summarizes with the run's own model, as the
first process did, instead of failing every compaction with "no summarizer model is
configured"; and the per-run cap (4) counts the compactions of every process that drove
the run, instead of starting again at 0 after a recovery.

Two runtimes over one store stand for the two processes: the first one's model dies
(a BaseException, as a SIGKILL leaves the run: ``running``, leased) when it is asked for
its ``kill_at``-th summary; the second recovers the run by id."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from plait.adapters.stores import open_store
from plait.adapters.system import SystemClock
from plait.application.events import CompactionEvent, RunEvent
from plait.application.ports import ModelCapabilities, ModelClient, ModelRequest, ModelResponse
from plait.domain.compaction import CompactionSettings
from plait.domain.runs import RunStatus
from plait.runtime import Runtime, open_model
from plait.testing import CharMeter, SequentialIds, echo_tool
from tests.compaction.conftest import run
from tests.compaction.test_loop import WINDOW, echo_turns
from tests.pg import empty_database

STEPS = 17  # the cap is reached and one more check skips, while the context stays
# under the window (a request over the window is never sent: the run would fail)
CAP = CompactionSettings().max_compactions_per_run
SETTINGS = CompactionSettings(summary_max_tokens=300)


class Killed(BaseException):
    """The process died (not an error anything in plait handles)."""


class DiesAtSummary:
    """The scripted model, but the process dies when its ``kill_at``-th summary is asked
    for (the compaction has started: its ``started`` event is out)."""

    def __init__(self, inner: ModelClient, kill_at: int) -> None:
        self.inner = inner
        self.kill_at = kill_at
        self.summaries = 0

    @property
    def name(self) -> str:
        return self.inner.name

    @property
    def capabilities(self) -> ModelCapabilities:
        return self.inner.capabilities

    async def complete(self, request: ModelRequest) -> ModelResponse:
        if request.role == "summarizer":
            self.summaries += 1
            if self.summaries == self.kill_at:
                raise Killed()
        return await self.inner.complete(request)


class Events:
    def __init__(self) -> None:
        self.events: list[RunEvent] = []

    def __call__(self, event: RunEvent) -> None:
        self.events.append(event)

    def compactions(self) -> list[tuple[str, str]]:
        return [(e.phase, e.detail) for e in self.events if isinstance(e, CompactionEvent)]


@pytest.fixture(params=["memory", "sqlite", "jsonl", "postgresql"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    kind = request.param
    if kind == "postgresql":
        url: str = request.getfixturevalue("pg_url")
        empty_database(url)
        yield url
    else:
        yield {
            "memory": "memory://",
            "sqlite": f"sqlite:///{tmp_path / 's.db'}",
            "jsonl": f"jsonl:///{tmp_path / 'store'}",
        }[kind]


def _script(tmp_path: Path) -> str:
    path = tmp_path / "script.yaml"
    body = {
        "version": 1,
        "model": "scripted-compacting",
        "capabilities": {"context_window": WINDOW, "max_output_tokens": 300},
        "assistant": echo_turns(STEPS),
        "summarizer": [{"structured": {"goal": "echo things"}} for _ in range(2 * STEPS)],
    }
    path.write_text(json.dumps(body), encoding="utf-8")
    return f"scripted:{path}"


def _runtime(store: Any, model: ModelClient | None, spec: str | None, tag: str) -> Runtime:
    return Runtime(
        store=store,
        artifacts=store,
        model=model,
        tools=[echo_tool().tool],
        clock=SystemClock(),
        ids=SequentialIds(prefix_tag=tag),
        compaction=SETTINGS,
        meter_for=lambda _: CharMeter(),
        model_spec=spec,
    )


async def _killed_then_recovered(
    url: str, tmp_path: Path, *, kill_at: int, recover_with_model: bool
) -> tuple[Any, Events, list[Any]]:
    spec = _script(tmp_path)
    store = open_store(url)
    first = _runtime(store, DiesAtSummary(open_model(spec), kill_at), spec, "")
    session = await first.service.create_session()
    with pytest.raises(Killed):
        await first.service.send(session.id, "Echo a lot, please.")
    [stuck] = await store.list_runs(session_id=session.id)
    assert stuck.status is RunStatus.RUNNING and stuck.lease is not None
    before = await store.list_summaries(session.id)
    assert len(before) == kill_at - 1
    # The second process: the same store, no model of its own unless asked.
    second_model = open_model(spec) if recover_with_model else None
    second = _runtime(store, second_model, spec if recover_with_model else None, "b")
    events = Events()
    [report] = await second.service.recover(run_id=stuck.id, observer=events, force=True)
    assert report.outcome == "resumed", report.detail
    assert report.result is not None
    summaries = await store.list_summaries(session.id)
    await store.close()
    return report.result.run, events, summaries


@pytest.mark.slow
def test_a_run_killed_at_the_start_of_a_compaction_compacts_after_recovery_without_a_model(
    store_url: str, tmp_path: Path
) -> None:
    async def go() -> None:
        ended, events, summaries = await _killed_then_recovered(
            store_url, tmp_path, kill_at=1, recover_with_model=False
        )
        assert ended.status is RunStatus.COMPLETED, ended.error
        phases = events.compactions()
        assert not [d for p, d in phases if "no summarizer model" in d], phases
        assert ("activated", "") in [(p, "") for p, _ in phases]
        assert len(summaries) == CAP  # it compacted again, up to the cap
        assert {s.model for s in summaries} == {"scripted-compacting"}

    run(go())


@pytest.mark.slow
@pytest.mark.parametrize("recover_with_model", [True, False])
def test_the_compaction_cap_of_a_run_holds_across_recovery(
    store_url: str, tmp_path: Path, recover_with_model: bool
) -> None:
    async def go() -> None:
        kill_at = CAP  # CAP - 1 compactions before the kill
        ended, events, summaries = await _killed_then_recovered(
            store_url, tmp_path, kill_at=kill_at, recover_with_model=recover_with_model
        )
        assert ended.status is RunStatus.COMPLETED, ended.error
        automatic = [s for s in summaries if s.trigger in ("pressure", "overflow")]
        assert len(automatic) == CAP, [s.generation for s in summaries]
        phases = [p for p, _ in events.compactions()]
        assert phases.count("activated") == 1  # the one left under the cap
        skipped = [d for p, d in events.compactions() if p == "skipped"]
        assert skipped and f"already compacted {CAP} time(s), the cap" in skipped[0]

    run(go())


def test_the_summarizer_of_a_run_taken_over() -> None:
    """A model configured for the role summarizes every run; the process's own model
    only its own runs; a run driven with its recorded model is summarized by that one."""
    from plait.adapters.stores.memory.store import MemoryStore
    from plait.application.compaction import CompactionService, ModelProfiles
    from plait.testing import FixedClock, ScriptedModel

    def model(name: str) -> ScriptedModel:
        return ScriptedModel({"version": 1, "model": name}, name=name)

    own, recorded = model("own"), model("recorded")

    def service(summarizer: ModelClient | None, follows: bool) -> CompactionService:
        return CompactionService(
            store=MemoryStore(),
            profiles=ModelProfiles([]),
            summarizer=summarizer,
            clock=FixedClock(),
            ids=SequentialIds(),
            summarizer_follows_run=follows,
        )

    configured = service(own, follows=False)
    assert configured.summarizer_for(recorded) is own
    assert configured.summarizer_for(None) is own
    default = service(own, follows=True)
    assert default.summarizer_for(recorded) is recorded
    assert default.summarizer_for(None) is own
    without = service(None, follows=True)
    assert without.summarizer_for(recorded) is recorded
    assert without.summarizer_for(None) is None
