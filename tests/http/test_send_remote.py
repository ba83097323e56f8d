"""``plait send --server``: the CLI against the live service."""

from __future__ import annotations

import json

import pytest

from plait.adapters.cli.main import main
from tests.http.conftest import Live
from tests.http.test_api import new_session


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
