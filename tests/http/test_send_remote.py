"""``plait send --server``: the CLI against the live service."""

from __future__ import annotations

import asyncio
import json

import pytest

from plait.adapters.stores.sqlite.store import SqliteStore
from plait.application.ports import Commit
from plait.domain.messages import UserMessage
from plait.entrypoints.cli.main import main
from tests.http.conftest import Live
from tests.http.test_api import new_session


@pytest.mark.slow
def test_send_through_the_server(live: Live, capsys: pytest.CaptureFixture[str]) -> None:
    with live.client() as c:
        sid = new_session(c)["session_id"]
    key = live.keys["alice"]
    code = main(["send", sid, "tool remote", "--server", live.url, "--api-key", key, "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0, out
    assert out["status"] == "completed"
    assert [m["kind"] for m in out["messages"]] == ["user", "assistant", "tool_result", "assistant"]
    assert out["messages"][-1]["text"] == "answer to tool remote"


@pytest.mark.slow
def test_send_through_the_server_errors(
    live: Live, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PLAIT_API_KEY", raising=False)
    assert main(["send", "ses_x", "hi", "--server", live.url, "--json"]) == 2
    assert "API key" in json.loads(capsys.readouterr().out)["error"]["message"]
    bob = live.keys["bob"]
    assert main(["send", "ses_x", "hi", "--server", live.url, "--api-key", bob, "--json"]) == 2
    err = json.loads(capsys.readouterr().out)["error"]
    assert err["code"] == "remote_error" and err["details"]["remote_code"] == "not_found"
    assert main(["send", "ses_x", "hi", "--server", "ftp://x", "--api-key", bob, "--json"]) == 2
    capsys.readouterr()


@pytest.mark.slow
def test_send_through_the_server_takes_the_budget_flags(
    live: Live, capsys: pytest.CaptureFixture[str]
) -> None:
    with live.client() as c:
        sid = new_session(c)["session_id"]
    key = ["--server", live.url, "--api-key", live.keys["alice"], "--json"]
    code = main(["send", sid, "tool once", "--max-steps", "1", "--output-cap", "4096", *key])
    out = json.loads(capsys.readouterr().out)
    assert code == 1 and (out["status"], out["error"]["code"]) == ("budget_exhausted", "max_steps")
    assert (out["budget"]["max_steps"], out["budget"]["tool_output_cap_bytes"]) == (1, 4096)
    # the service's model declares no prices: the ceiling is refused, nothing is queued
    assert main(["send", sid, "hello", "--max-cost", "1", *key]) == 2
    err = json.loads(capsys.readouterr().out)["error"]
    assert err["details"]["remote_code"] == "config_error"
    assert "declares none" in err["message"]
    with live.client() as c:
        assert len(c.get(f"/v1/sessions/{sid}/runs").json()["runs"]) == 1


def _remote(live: Live, *argv: str) -> list[str]:
    return [*argv, "--server", live.url, "--api-key", live.keys["alice"]]


@pytest.mark.slow
def test_send_through_the_server_prints_what_send_prints(
    live: Live, capsys: pytest.CaptureFixture[str]
) -> None:
    with live.client() as c:
        sid = new_session(c)["session_id"]
    assert main(["send", *_remote(live, sid, "tool remote")]) == 0
    out = capsys.readouterr().out
    assert "[1] user:\n    tool remote" in out
    assert "[2] assistant (step 1):\n    calling echo" in out
    assert '→ echo({"text": "tool remote"})  [call_1]' in out
    assert "[3] echo [call_1] succeeded" in out
    assert "[4] assistant (step 2):\n    answer to tool remote" in out
    assert "  status      completed" in out
    assert "2 steps, 2 model calls (0 corrections), 1 tool call" in out
    assert "[assistant] \n" not in out and "[user]" not in out  # not the old bare lines
    # in the order of the session, as local send prints them: the user's message first
    # (no event carries it: the submission stores it)
    at = [out.index(f"[{seq}] ") for seq in (1, 2, 3, 4)]
    assert at == sorted(at), out


@pytest.mark.slow
def test_send_through_the_server_finds_its_messages_in_a_long_session(
    live: Live, capsys: pytest.CaptureFixture[str]
) -> None:
    """The run's messages are read from where the run began, not from the first page of
    the session's history (1,000 messages): in a longer session they are past it."""
    with live.client() as c:
        sid = new_session(c)["session_id"]
    earlier = tuple(
        UserMessage(id=f"msg_old{i}", text=f"old {i}", created_at=1.0) for i in range(1_005)
    )

    async def fill() -> None:
        store = SqliteStore(live.store_path)
        try:
            await store.commit(Commit(session_id=sid, expected_version=0, messages=earlier))
        finally:
            await store.close()

    asyncio.run(fill())
    assert main(["send", *_remote(live, sid, "tool remote"), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [m["seq"] for m in out["messages"]] == [1_006, 1_007, 1_008, 1_009]
    assert out["messages"][-1]["text"] == "answer to tool remote"
    assert main(["send", *_remote(live, sid, "hello")]) == 0
    text = capsys.readouterr().out
    assert text.index("[1010] user:\n    hello") < text.index("[1011] assistant")


@pytest.mark.slow
def test_send_through_the_server_says_why_a_run_failed(
    live: Live, capsys: pytest.CaptureFixture[str]
) -> None:
    with live.client() as c:
        sid = new_session(c)["session_id"]
    assert main(["send", *_remote(live, sid, "tool once"), "--max-steps", "1"]) == 1
    out = capsys.readouterr().out
    assert "  status      budget_exhausted" in out
    assert "  error       max_steps: " in out


@pytest.mark.slow
def test_send_through_the_server_names_the_approvals_a_run_waits_for(
    gated: Live, capsys: pytest.CaptureFixture[str]
) -> None:
    with gated.client() as c:
        sid = new_session(c)["session_id"]
    assert main(["send", *_remote(gated, sid, "tool gated")]) == 1
    out = capsys.readouterr().out
    with gated.client() as c:
        (pending,) = c.get(f"/v1/sessions/{sid}/approvals").json()["approvals"]
    assert "  status      awaiting_approval" in out
    assert "waits for 1 decision:" in out
    assert f"  {pending['approval_id']}  echo  call {pending['call_id']}  why: " in out
    assert main(["send", *_remote(gated, sid, "tool again"), "--json"]) == 2  # session busy
    capsys.readouterr()


@pytest.mark.slow
def test_send_through_the_server_events_are_json_lines(
    live: Live, capsys: pytest.CaptureFixture[str]
) -> None:
    with live.client() as c:
        sid = new_session(c)["session_id"]
    assert main(["send", *_remote(live, sid, "tool remote"), "--events"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [x["event"] for x in lines][-1] == "run"
    kinds = [x["kind"] for x in lines if x["event"] == "message"]
    assert kinds[-3:] == ["assistant", "tool_result", "assistant"]
    assert lines[-1]["status"] == "completed"


@pytest.mark.slow
@pytest.mark.parametrize(
    ("flag", "value"),
    [("--model", "scripted:x.json"), ("--policy", "p.yaml"), ("--db", "memory://")],
)
def test_send_through_the_server_refuses_local_flags(
    live: Live, capsys: pytest.CaptureFixture[str], flag: str, value: str
) -> None:
    with live.client() as c:
        sid = new_session(c)["session_id"]
    assert main(["send", *_remote(live, sid, "hello"), flag, value, "--json"]) == 2
    err = json.loads(capsys.readouterr().out)["error"]
    assert err["code"] == "usage" and f"{flag} does not apply with --server" in err["message"]
    with live.client() as c:
        assert c.get(f"/v1/sessions/{sid}/runs").json()["runs"] == []  # nothing was sent
