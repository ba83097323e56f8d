"""``plait models list|check`` and ``plait demo --model``, against local fake servers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from plait.adapters.models._catalog import CATALOG_DATE
from plait.entrypoints.cli.main import main
from plait.testing.fake_providers import FakeProvider, FakeTurn, Reply
from tests.adapters.test_runs import demo_turns


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_models_list_shows_builtin_and_configured_models(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "plait.toml").write_text(
        '[models.local]\nspec = "openai-compatible:http://127.0.0.1:8000/v1#qwen"\n'
        "context_window = 32768\nprice_input_per_mtok = 0\n",
        encoding="utf-8",
    )
    monkeypatch.chdir(tmp_path)
    code, out, _ = _run(capsys, "models", "list", "--json")
    assert code == 0
    listed = json.loads(out)
    assert listed["catalog"]["as_of"] == CATALOG_DATE
    assert listed["catalog"]["source"].startswith("https://")
    rows = {r["spec"]: r for r in listed["models"]}
    assert rows["anthropic:claude-sonnet-4-5"]["capabilities"]["price_output_per_mtok"] == 15.0
    gpt = rows["openai:gpt-4o"]
    assert gpt["source"] == "built-in" and gpt["capabilities"]["context_window"] == 128_000
    local = rows["local = openai-compatible:http://127.0.0.1:8000/v1#qwen"]
    assert local["capabilities"]["context_window"] == 32768
    assert local["source"] == str(tmp_path / "plait.toml")
    code, text, _ = _run(capsys, "models", "list")
    assert code == 0 and "anthropic:claude-haiku-4-5" in text and "200,000" in text
    assert text.startswith(f"built-in catalog as of {CATALOG_DATE} (refresh: scripts/")


@pytest.mark.slow
def test_models_check_reports_auth_tools_and_streaming(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with FakeProvider("openai", [FakeTurn(calls=(("call_p", "ping", {}),))]) as fake:
        spec = f"openai-compatible:{fake.base_url}#any"
        code, out, _ = _run(capsys, "models", "check", spec, "--json")
    assert code == 0, out
    report = json.loads(out)
    assert report["ok"] is True and report["model"] == spec
    assert [(c["check"], c["ok"]) for c in report["checks"]] == [
        ("auth", True), ("tool calling", True), ("streaming", True)
    ]  # fmt: skip
    (request,) = fake.requests
    assert request.body["stream"] is True and request.body["tools"][0]["function"]["name"] == "ping"


@pytest.mark.slow
def test_models_check_failing_auth(capsys: pytest.CaptureFixture[str]) -> None:
    denied = Reply(status=401, body={"error": {"message": "Incorrect API key provided"}})
    with FakeProvider("openai", []) as fake:
        fake.fail_first(denied)
        code, out, _ = _run(capsys, "models", "check", f"openai-compatible:{fake.base_url}#any")
    assert code == 1
    lines = out.splitlines()
    assert lines[0].split()[:3] == ["auth", "FAILED", "AUTHENTICATION:"]
    assert "Incorrect API key provided" in lines[0]
    assert [line.split()[0] for line in lines] == ["auth", "tool", "streaming"]


def test_models_check_without_a_key_is_a_config_error(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    code, out, err = _run(capsys, "models", "check", "anthropic:claude-haiku-4-5", "--json")
    assert code == 2
    assert json.loads(out)["error"]["details"]["variable"] == "ANTHROPIC_API_KEY"
    assert "ANTHROPIC_API_KEY" in err


@pytest.mark.slow
def test_demo_with_a_model(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # the server's model declares no context window: the run needs compaction off
    monkeypatch.chdir(tmp_path)
    (tmp_path / "plait.toml").write_text("[compaction]\nauto = false\n", encoding="utf-8")
    with FakeProvider("openai", demo_turns()) as fake:
        spec = f"openai-compatible:{fake.base_url}#any"
        code, out, _ = _run(capsys, "demo", "--model", spec, "--clean", "--json")
    assert code == 0, out
    report = json.loads(out)
    assert report["run"]["status"] == "completed" and report["run"]["model"] == spec
    assert report["tests_after"]["passed"] and report["deploy_config_untouched"]
    assert len(fake.requests) == 4
