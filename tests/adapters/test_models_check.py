"""``plait models check`` tells auth, tool calling and streaming apart, against local
servers that refuse a stream, refuse tools, or say nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from plait.entrypoints.cli.main import main
from plait.testing.fake_providers import DIALECTS, FakeHttpServer, FakeTurn, RecordedRequest, Reply


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _answer(request: RecordedRequest, turn: FakeTurn) -> Reply:
    """``turn`` in the OpenAI Chat wire shape, streamed when the request asks for it."""
    openai = DIALECTS["openai"]
    if request.body.get("stream"):
        return Reply(events=tuple(openai.events(turn, "m")))
    return Reply(body=openai.json(turn, "m"))


PING = FakeTurn(calls=(("call_p", "ping", {}),))


@pytest.mark.slow
def test_models_check_tells_a_refused_stream_from_failed_auth(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A server that refuses streaming (HTTP 400 with an empty message) is answered
    plainly: auth and tool calling pass, streaming fails and says why."""

    def reply(request: RecordedRequest) -> Reply:
        if request.body.get("stream"):
            return Reply(status=400, body={"error": {"message": "", "code": 400}})
        return _answer(request, PING)

    with FakeHttpServer(reply_for=reply) as server:
        code, out, _ = _run(capsys, "models", "check", f"openai-compatible:{server.url}/v1#m")
    assert code == 1
    lines = out.splitlines()
    assert [line.split()[:2] for line in lines] == [
        ["auth", "ok"],
        ["tool", "calling"],
        ["streaming", "FAILED"],
    ]
    assert lines[1].split()[2] == "ok"
    assert "refused a streamed call" in lines[2] and "no error message" in lines[2]
    assert not any(line.rstrip().endswith(":") for line in lines)


@pytest.mark.slow
def test_models_check_tells_refused_tools_from_failed_auth(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """vLLM started without tool parsing refuses any request with tools."""
    refusal = (
        '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set'
    )
    vllm_400 = {"object": "error", "message": refusal, "type": "BadRequestError", "code": 400}

    def reply(request: RecordedRequest) -> Reply:
        if request.body.get("tools"):
            return Reply(status=400, body=vllm_400)
        return _answer(request, FakeTurn(text="pong"))

    with FakeHttpServer(reply_for=reply) as server:
        spec = f"openai-compatible:{server.url}/v1#m"
        code, out, _ = _run(capsys, "models", "check", spec, "--json")
    assert code == 1
    checks = {c["check"]: c for c in json.loads(out)["checks"]}
    assert checks["auth"]["ok"] is True
    assert checks["tool calling"]["ok"] is False
    assert checks["tool calling"]["detail"].startswith("INVALID_REQUEST: ")
    assert refusal in checks["tool calling"]["detail"]
    assert checks["streaming"]["ok"] is True


@pytest.mark.slow
def test_models_check_names_a_silent_server(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with FakeHttpServer([Reply(stall=True)]) as server:
        (tmp_path / "plait.toml").write_text(
            f'[models.silent]\nspec = "openai-compatible:{server.url}/v1#m"\n'
            "idle_timeout_seconds = 0.3\n",
            encoding="utf-8",
        )
        monkeypatch.chdir(tmp_path)
        code, out, _ = _run(capsys, "models", "check", "silent")
    assert code == 1
    first = out.splitlines()[0].split()
    assert first[:3] == ["auth", "FAILED", "model_timeout:"]
    assert "sent nothing for 0.3 s" in out
