"""``plait send --model openai-compatible:http://127.0.0.1:PORT/v1#any`` against a local
OpenAI-compatible server started by the test."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from plait.entrypoints.cli.main import main
from plait.testing.fake_providers import FakeProvider, FakeTurn


@pytest.mark.slow
def test_send_to_a_local_openai_compatible_server(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "notes.txt").write_text("hello plait\n", encoding="utf-8")
    db = f"sqlite:///{tmp_path / 'plait.db'}"
    turns = [
        FakeTurn(text="Reading it.", calls=(("call_a", "read_file", {"path": "notes.txt"}),)),
        FakeTurn(text="It says hello plait."),
    ]
    with FakeProvider("openai", turns, model="any") as fake:
        spec = f"openai-compatible:{fake.base_url}#any"
        assert main(["sessions", "new", "--workspace", str(ws), "--db", db, "--json"]) == 0
        session = json.loads(capsys.readouterr().out)["session_id"]
        # a server model declares no context window: with automatic compaction on (the
        # default) it is refused before anything is written or sent ...
        asked = ["send", session, "What is in notes.txt?", "--model", spec, "--db", db, "--json"]
        assert main(asked) == 2
        refused = json.loads(capsys.readouterr().out)["error"]
        assert refused["code"] == "token_meter_model_unconfigured"
        assert fake.requests == []
        # ... and runs with it off (or with context_window declared in plait.toml)
        monkeypatch.chdir(tmp_path)
        (tmp_path / "plait.toml").write_text("[compaction]\nauto = false\n", encoding="utf-8")
        code = main(
            ["send", session, "What is in notes.txt?", "--model", spec, "--db", db, "--json"]
        )
        out = capsys.readouterr().out
    assert code == 0, out
    result = json.loads(out)
    assert result["status"] == "completed"
    assert result["model"] == spec
    kinds = [m["kind"] for m in result["messages"]]
    assert kinds == ["user", "assistant", "tool_result", "assistant"]
    assert result["messages"][2]["content"].startswith("hello plait")
    assert result["messages"][-1]["text"] == "It says hello plait."
    first, second = (r.body for r in fake.requests)
    assert first["model"] == "any" and "read_file" in json.dumps(first["tools"])
    assert second["messages"][-1] == {
        "role": "tool",
        "tool_call_id": "call_a",
        "content": result["messages"][2]["content"],
    }
    assert fake.requests[0].headers["authorization"] == "Bearer not-needed"
