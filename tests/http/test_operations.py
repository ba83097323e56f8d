"""Operations: settings documented by ``plait serve --help``, readiness when the store
does not answer, JSON log lines with run and session ids, and a ``plait worker`` process
that shuts down gracefully on SIGTERM (stops claiming, exits 0 with its figures)."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import subprocess
import sys
import time
from dataclasses import fields
from pathlib import Path

import pytest

from plait.adapters.stores.memory.store import MemoryStore
from plait.domain.runs import RunStatus
from plait.entrypoints.cli.main import main
from plait.entrypoints.http.app import create_app
from plait.entrypoints.http.server import Settings, configure_logging, context_for
from plait.runtime import Runtime
from plait.testing import FixedClock, SequentialIds
from tests.http.conftest import start_server
from tests.http.test_api import error

ENV_NAMES = sorted(f"PLAIT_{f.name.upper()}" for f in fields(Settings))
SERVICE_DOC = Path(__file__).parents[2] / "docs" / "service.md"


@pytest.mark.parametrize("command", ["serve", "worker"])
def test_help_documents_every_setting(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main([command, "--help"])
    assert done.value.code == 0
    text = capsys.readouterr().out
    missing = [name for name in ENV_NAMES if name not in text]
    assert missing == [], f"`plait {command} --help` does not document {missing}"
    doc = SERVICE_DOC.read_text(encoding="utf-8")
    assert [name for name in ENV_NAMES if f"`{name}`" not in doc] == []


def test_ready_answers_503_when_the_store_does_not(tmp_path: Path) -> None:
    store = MemoryStore()
    rt = Runtime(
        store=store, artifacts=store, model=None, tools=[], clock=FixedClock(),
        ids=SequentialIds(),
    )  # fmt: skip
    app = create_app(context_for(rt, Settings(db="memory://", serve_workers=0)))
    server, thread, url = start_server(app)
    try:
        import httpx

        with httpx.Client(base_url=url, timeout=10) as c:
            assert c.get("/v1/ready").json() == {"status": "ready"}
            asyncio.run(store.close())  # the store stops answering
            err = error(c.get("/v1/ready"), 503, "not_ready")
            assert "store" in err["message"]
            assert c.get("/v1/health").json() == {"status": "ok"}  # the process is up
    finally:
        server.should_exit = True
        thread.join(timeout=20)


def test_logs_are_json_lines_with_run_and_session_ids(
    capsys: pytest.CaptureFixture[str],
) -> None:
    root = logging.getLogger()
    saved = (root.handlers[:], root.level)
    try:
        configure_logging("info")
        logging.getLogger("plait.worker").info(
            "run claimed", extra={"run_id": "run_1", "session_id": "ses_1", "worker": "w1"}
        )
        logging.getLogger("plait.worker").debug("not shown at info")
    finally:
        root.handlers[:], _ = saved
        root.setLevel(saved[1])
    lines = [json.loads(x) for x in capsys.readouterr().err.splitlines()]
    assert len(lines) == 1
    (line,) = lines
    assert {k: line[k] for k in ("level", "logger", "msg", "run_id", "session_id", "worker")} == {
        "level": "info", "logger": "plait.worker", "msg": "run claimed",
        "run_id": "run_1", "session_id": "ses_1", "worker": "w1",
    }  # fmt: skip


def _submit(url: str) -> str:
    async def go() -> str:
        rt = Runtime.open(db=url, tools=())
        try:
            session = await rt.service.create_session(owner="ana")
            run = await rt.service.submit(session.id, "hello")
            return run.id
        finally:
            await rt.close()

    return asyncio.run(go())


def _status(url: str, run_id: str) -> RunStatus:
    async def go() -> RunStatus:
        rt = Runtime.open(db=url, store_only=True)
        try:
            return (await rt.store.get_run(run_id)).status
        finally:
            await rt.close()

    return asyncio.run(go())


@pytest.mark.slow
def test_a_worker_process_drains_and_exits_on_sigterm(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'plait.db'}"
    script = tmp_path / "m.json"
    script.write_text(json.dumps({"version": 1, "assistant": [{"text": "hi there"}]}))
    run_id = _submit(url)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PLAIT_")}
    env.update(PLAIT_DB=url, PLAIT_MODEL=f"scripted:{script}", PLAIT_GRACE_SECONDS="5")
    proc = subprocess.Popen(
        [sys.executable, "-m", "plait", "worker", "--json"],
        env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while _status(url, run_id) is not RunStatus.COMPLETED:
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the worker did not run the queued run"
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err
    stats = json.loads(out)
    assert stats["claimed"] == 1 and stats["finished"] == {"completed": 1}
    assert stats["released"] == 0
    logs = [json.loads(x) for x in err.splitlines() if x.startswith("{")]
    said = [x["msg"] for x in logs]
    assert "worker started" in said and said[-1] == "worker stopped"
    claimed = next(x for x in logs if x["msg"] == "run claimed")
    assert claimed["run_id"] == run_id and claimed["session_id"]


def test_every_error_kind_maps_to_one_status_and_code() -> None:
    from plait.domain.errors import (
        ApprovalRefusedError,
        ConflictError,
        InvalidCutPointError,
        ModelError,
        RunStateError,
        SessionBusyError,
        SessionNotFoundError,
        ValidationError,
    )
    from plait.entrypoints.http._errors import status_and_body

    cases = [
        (SessionNotFoundError("gone", session_id="s"), 404, "not_found"),
        (SessionBusyError("busy", session_id="s"), 409, "session_busy"),
        (ConflictError("raced"), 409, "conflict"),
        (RunStateError("ended"), 409, "run_state"),
        (InvalidCutPointError("inside a unit"), 422, "invalid_cut_point"),
        (ValidationError("bad"), 400, "invalid_value"),
        (ApprovalRefusedError("expired"), 403, "forbidden"),
        (ModelError("provider down"), 500, "internal"),
    ]
    for e, status, code in cases:
        got, body = status_and_body(e)
        assert (got, body["error"]["code"]) == (status, code), e
        if status == 500:
            assert "provider down" not in body["error"]["message"]  # nothing internal leaks
