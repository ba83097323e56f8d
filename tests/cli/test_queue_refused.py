"""A run is never stranded by a surface that cannot continue it (issue 20 item 7): on a
JSONL store no worker can serve, ``--queue`` is refused before anything is written
(exit 2, an error object with ``--json``), and a ``queued`` run (left by an older plait)
can be continued with ``runs resume`` or ``runs recover --run R --force``. ``keys create``
is refused there too: the store declares no API keys."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from plait.adapters.stores import open_store
from plait.application._queued import queued
from plait.domain.runs import Budget
from plait.testing import SequentialIds
from tests.cli.test_approvals import ONE_NOTE, Plait


class JsonlPlait(Plait):
    """``plait`` in-process over a JSONL store."""

    def __init__(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str], mp: pytest.MonkeyPatch
    ) -> None:
        super().__init__(tmp_path, capsys, mp)
        self.db = f"jsonl:///{tmp_path / 'store'}"


@pytest.fixture
def plait(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> JsonlPlait:
    return JsonlPlait(tmp_path, capsys, monkeypatch)


def _refused(p: Plait, *argv: str) -> dict[str, Any]:
    got, out, err = p.run(*argv, "--json")
    assert got == 2, err + out
    body = json.loads(out)["error"]
    assert body["code"] == "config_error" and "no run queue" in body["message"], body
    assert "Traceback" not in err
    return dict(body)


def test_approve_with_queue_on_jsonl_is_refused_and_the_run_can_still_be_continued(
    plait: JsonlPlait,
) -> None:
    run_id, approval_id = plait.waiting(ONE_NOTE)
    _refused(plait, "approvals", "approve", approval_id, "--queue")
    _refused(plait, "runs", "resume", run_id, "--queue")
    # Nothing was written: the request still waits, so does the run.
    (pending,) = plait.json("approvals", "list", "--pending")["approvals"]
    assert pending["approval_id"] == approval_id
    assert plait.json("runs", "show", run_id)["status"] == "awaiting_approval"
    # Continued here instead, as the error says.
    done = plait.json("approvals", "approve", approval_id)
    assert done["run"]["status"] == "completed"
    assert (plait.ws / "notes" / "a.txt").read_text() == "hi\n"


def test_resolve_with_queue_on_jsonl_is_refused_before_anything_is_read(
    plait: JsonlPlait,
) -> None:
    plait.json("sessions", "new")
    body = _refused(
        plait, "runs", "resolve", "run_x", "--call", "c1", "--status", "succeeded",
        "--note", "checked", "--queue",
    )  # fmt: skip
    assert "leave out --queue" in body["message"]


def _queued_run(p: Plait, sid: str) -> str:
    """A ``queued`` run on the JSONL store, as an older plait's ``--queue`` left it."""

    async def go() -> str:
        store = open_store(p.db, create=False)
        try:
            now = 1_700_000_000.0
            run, commit = queued(sid, "hello", Budget(), SequentialIds(), now, owner=None)
            await store.start_run(commit)
            return run.id
        finally:
            await store.close()

    return asyncio.run(go())


@pytest.mark.parametrize("how", ["resume", "recover"])
def test_a_queued_run_on_jsonl_is_continued_in_process(plait: JsonlPlait, how: str) -> None:
    script = plait.tmp / "answer.json"
    script.write_text(json.dumps({"version": 1, "assistant": [{"text": "Hi there."}]}))
    sid = plait.json("sessions", "new")["session_id"]
    run_id = _queued_run(plait, sid)
    assert plait.json("runs", "show", run_id)["status"] == "queued"
    model = f"scripted:{script}"
    if how == "resume":
        done = plait.json("runs", "resume", run_id, "--model", model)
        assert done["status"] == "completed"
    else:
        skipped = plait.json("runs", "recover", "--run", run_id, "--model", model)["recoveries"]
        assert "runs resume" in skipped[0]["detail"]  # not forced: says how to go on
        (report,) = plait.json("runs", "recover", "--run", run_id, "--force", "--model", model)[
            "recoveries"
        ]
        assert report["outcome"] == "resumed" and report["run"]["status"] == "completed"
    assert plait.json("runs", "show", run_id)["status"] == "completed"
    assert plait.json("sessions", "list")["sessions"][0]["active_run_id"] is None


def test_keys_create_on_a_store_without_api_keys_is_refused(plait: JsonlPlait) -> None:
    plait.json("sessions", "new")
    got, out, err = plait.run("keys", "create", "--principal", "ana", "--json")
    assert got == 2, err + out
    body = json.loads(out)["error"]
    assert body["code"] == "config_error" and "cannot hold API keys" in body["message"], body
