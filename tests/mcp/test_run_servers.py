"""MCP servers chosen per run: ``plait send --mcp NAME`` / ``--no-mcp`` and the HTTP
message body's ``mcp_servers``, recorded with the run so a process that continues it
(resume, a worker) offers the same servers' tools; an unknown name is refused before
anything is written."""

from __future__ import annotations

import asyncio
import io
import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from plait.application.ports import ModelRequest, ModelResponse, RawToolCall
from plait.domain.errors import ValidationError
from plait.domain.policy import Action, Policy, ToolRule
from plait.domain.runs import RunStatus
from plait.domain.session import Session
from plait.entrypoints.cli.main import main
from plait.entrypoints.http.app import create_app
from plait.entrypoints.http.server import Settings, context_for
from plait.runtime import Runtime
from plait.testing import FunctionModel, ScriptedModel
from tests.http.conftest import _keys, start_server
from tests.mcp.conftest import FAULT_SERVER, HERE, PYTHON_BINDS, fault_server

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("bwrap")]

ALLOW_OTHER = Policy(other=Action.ALLOW)


def offered(request: ModelRequest) -> set[str]:
    return {t.name for t in request.context.tools if t.name.startswith("mcp__")}


def both() -> dict[str, Any]:
    return {"fa": fault_server("fa"), "fb": fault_server("fb")}


def test_a_run_keeps_its_servers_when_another_process_resumes_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    monkeypatch.chdir(ws)
    db = f"sqlite:///{tmp_path / 'plait.db'}"
    note = {"name": "mcp__fa__write_note", "arguments": {"text": "x"}, "id": "c1"}
    first = ScriptedModel({"version": 1, "assistant": [{"tool_calls": [note]}]})
    rt = Runtime.open(db=db, model=first, mcp_servers=both())

    async def start() -> Any:
        try:
            await rt.store.create_session(Session(id="s1", created_at=1.0, workspace=str(ws)))
            with pytest.raises(ValidationError, match="unknown MCP server 'nope'"):
                await rt.service.send("s1", "go", mcp_servers=["nope"])
            assert await rt.store.read_messages("s1") == []  # nothing written
            return await rt.service.send("s1", "go", mcp_servers=["fa"])
        finally:
            await rt.close()

    waiting = asyncio.run(start())
    assert waiting.run.status is RunStatus.AWAITING_APPROVAL  # destructive: a person decides
    assert waiting.run.mcp_servers == ("fa",)
    names = offered(first.requests[0])
    assert names and all(n.startswith("mcp__fa__") for n in names), names
    # another process, with both servers configured, continues it: still only fa's tools
    second = ScriptedModel({"version": 1, "assistant": [{"tool_calls": [note]}, {"text": "done"}]})
    trust = Policy(rules=(ToolRule(name="ok", action=Action.ALLOW, tools=("mcp__fa__*",)),))
    rt2 = Runtime.open(db=db, model=second, mcp_servers=both(), policy=trust)

    async def resume() -> Any:
        try:
            stored = await rt2.store.get_run(waiting.run.id)
            assert stored.mcp_servers == ("fa",)
            return await rt2.service.resume(waiting.run.id)
        finally:
            await rt2.close()

    resumed = asyncio.run(resume())
    assert resumed.run.status is RunStatus.COMPLETED
    assert resumed.run.mcp_servers == ("fa",)
    (request,) = second.requests
    names = offered(request)
    assert names and all(n.startswith("mcp__fa__") for n in names), names


def write_config(ws: Path) -> None:
    binds = json.dumps([*PYTHON_BINDS, str(HERE)])
    text = ""
    for name in ("fa", "fb"):
        text += (
            f"[mcp.servers.{name}]\ncommand = {json.dumps(sys.executable)}\n"
            f"args = [{json.dumps(str(FAULT_SERVER))}]\nro_binds = {binds}\n"
        )
    (ws / "plait.toml").write_text(text)


@pytest.fixture
def cli_ws(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "ws"
    path.mkdir()
    monkeypatch.chdir(path)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("PLAIT_DB", f"sqlite:///{tmp_path / 'plait.db'}")
    write_config(path)
    return path


def new_session(capsys: pytest.CaptureFixture[str], ws: Path) -> str:
    assert main(["sessions", "new", "--workspace", str(ws), "--json"]) == 0
    session_id: str = json.loads(capsys.readouterr().out)["session_id"]
    return session_id


def test_send_mcp_offers_only_the_named_servers_and_records_them(
    cli_ws: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    peek_fa = {"name": "mcp__fa__peek", "arguments": {}, "id": "c1"}
    script = tmp_path / "model.json"
    script.write_text(
        json.dumps({"version": 1, "assistant": [{"tool_calls": [peek_fa]}, {"text": "done"}]})
    )
    session = new_session(capsys, cli_ws)
    model = ["--model", f"scripted:{script}", "--json"]
    # an unknown name: exit 2, naming it, before anything is written
    assert main(["send", session, "go", "--mcp", "nope", *model]) == 2
    err = capsys.readouterr().err
    assert "--mcp 'nope': no such MCP server" in err and "'fa', 'fb'" in err
    assert main(["history", session, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["messages"] == []
    assert main(["send", session, "go", "--mcp", "fa", *model]) == 0
    run = json.loads(capsys.readouterr().out)
    assert run["status"] == "completed" and run["mcp_servers"] == ["fa"]
    peeked = [m for m in run["messages"] if m.get("kind") == "tool_result"]
    assert len(peeked) == 1 and "peeked" in json.dumps(peeked)
    turns = [{"tool_calls": [peek_fa]}, {"text": "done"}, {"text": "done again"}]
    script.write_text(json.dumps({"version": 1, "assistant": turns}))  # by the history
    assert main(["send", session, "again", "--no-mcp", *model]) == 0
    assert json.loads(capsys.readouterr().out)["mcp_servers"] == []
    assert main(["runs", "list", "--session", session, "--json"]) == 0
    runs = json.loads(capsys.readouterr().out)["runs"]
    assert sorted(str(r["mcp_servers"]) for r in runs) == ["['fa']", "[]"]


@pytest.fixture
def api(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Any, list[Any]]]:
    ws = tmp_path / "ws"
    ws.mkdir()
    monkeypatch.chdir(ws)
    path = tmp_path / "plait.db"
    keys = _keys(path)
    requests: list[ModelRequest] = []

    async def behave(request: ModelRequest) -> ModelResponse:
        requests.append(request)
        if len(request.context.items) == 1:
            name = sorted(offered(request))[0]
            return ModelResponse(tool_calls=(RawToolCall(id="c1", name=name, arguments={}),))
        return ModelResponse(text="done")

    rt = Runtime.open(
        db=f"sqlite:///{path}",
        model=FunctionModel(behave, name="fn"),
        mcp_servers=both(),
        policy=ALLOW_OTHER,
    )
    settings = Settings(db=f"sqlite:///{path}", serve_workers=1)
    server, thread, url = start_server(create_app(context_for(rt, settings)))
    import httpx

    client = httpx.Client(
        base_url=url, headers={"Authorization": f"Bearer {keys['alice']}"}, timeout=30.0
    )
    try:
        yield client, requests
    finally:
        client.close()
        server.should_exit = True
        thread.join(timeout=20)
        asyncio.run(rt.close())


def test_the_http_message_body_chooses_the_servers(api: tuple[Any, list[Any]]) -> None:
    client, requests = api
    document = client.get("/v1/openapi.json").json()
    field = document["components"]["schemas"]["MessageIn"]["properties"]["mcp_servers"]
    (array,) = [o for o in field["anyOf"] if o.get("type") == "array"]
    assert array["items"]["enum"] == ["fa", "fb"]  # what a client may choose
    session = client.post("/v1/sessions", json={}).json()["session_id"]
    refused = client.post(
        f"/v1/sessions/{session}/messages", json={"text": "go", "mcp_servers": ["nope"]}
    )
    assert refused.status_code == 400, refused.text
    assert "unknown MCP server 'nope'" in refused.text
    assert client.get(f"/v1/sessions/{session}/messages").json()["messages"] == []
    posted = client.post(
        f"/v1/sessions/{session}/messages", json={"text": "go", "mcp_servers": ["fb"]}
    )
    assert posted.status_code == 202, posted.text
    assert posted.json()["mcp_servers"] == ["fb"]
    run_id = posted.json()["run_id"]
    deadline = time.monotonic() + 60
    while (run := client.get(f"/v1/runs/{run_id}").json())["status"] != "completed":
        assert time.monotonic() < deadline, run
        time.sleep(0.1)
    assert requests
    for request in requests:
        names = offered(request)
        assert names and all(n.startswith("mcp__fb__") for n in names), names


def test_chat_mcp_offers_only_the_named_servers_to_every_run(
    cli_ws: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    peek_fa = {"name": "mcp__fa__peek", "arguments": {}, "id": "c1"}
    script = tmp_path / "model.json"
    turns = [{"tool_calls": [peek_fa]}, {"text": "done"}, {"text": "and again"}]
    script.write_text(json.dumps({"version": 1, "assistant": turns}))
    session = new_session(capsys, cli_ws)
    model = ["--model", f"scripted:{script}", "--json"]
    chat = ["chat", "--session", session, *model]

    def lines(text: bytes) -> None:
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(text)))

    lines(b"go\n")
    assert main([*chat, "--mcp", "nope"]) == 2
    assert "--mcp 'nope': no such MCP server" in capsys.readouterr().err
    lines(b"go\nagain\n")
    assert main([*chat, "--mcp", "fa"]) == 0
    events = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    runs = [e for e in events if e.get("event") == "run"]
    assert [r["status"] for r in runs] == ["completed", "completed"], events
    assert [r["mcp_servers"] for r in runs] == [["fa"], ["fa"]]
    assert "peeked" in json.dumps(events)
