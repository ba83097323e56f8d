"""Every recorded overflow body (fixtures/providers/errors/overflow_vectors.json) goes the
real way: a loopback server sends it, the official SDK raises, plait normalizes; each
must come out as its ``expect`` (``CONTEXT_WINDOW_EXCEEDED`` for overflows, so overflow
recovery starts; the look-alikes keep their own code), in a plain and a streamed call."""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace
from typing import Any

import pytest

from plait.adapters.models import open_model
from plait.application.ports import ModelClient
from plait.config import Config
from plait.domain.errors import ModelError, ModelErrorCode
from plait.testing.fake_providers import FakeHttpServer, Reply
from tests.adapters._cassettes import FIXTURES
from tests.adapters._clients import ask, client_for

VECTORS: list[dict[str, Any]] = json.loads(
    (FIXTURES / "errors" / "overflow_vectors.json").read_text(encoding="utf-8")
)["cases"]


def _id(case: dict[str, Any]) -> str:
    return f"{case['server']}-{case['status']}-{VECTORS.index(case)}"


def _reply(case: dict[str, Any]) -> Reply:
    if "stream_events" in case:
        events = tuple((name, payload) for name, payload in case["stream_events"])
        return Reply(status=case["status"], events=events)
    return Reply(status=case["status"], body=case["body"])


def _client(case: dict[str, Any], url: str) -> ModelClient:
    if case["sdk"] == "openai":
        return open_model(f"openai-compatible:{url}/v1#any", config=Config(), env={})
    return client_for(case["sdk"], url)


def _runs() -> list[Any]:
    runs = []
    for case in VECTORS:
        for streamed in (False, True):
            if "stream_events" in case and not streamed:
                continue
            mode = "streamed" if streamed else "plain"
            runs.append(pytest.param(case, streamed, id=f"{_id(case)}-{mode}"))
    return runs


def test_every_server_named_in_the_issue_has_an_overflow_vector() -> None:
    overflowing = {c["server"] for c in VECTORS if c["expect"] == "CONTEXT_WINDOW_EXCEEDED"}
    wanted = {
        *("openai", "openai-responses", "azure-openai", "anthropic", "gemini", "deepseek"),
        *("vllm", "llama.cpp", "ollama", "lm-studio", "tgi", "openrouter"),
        *("bedrock-via-litellm", "bedrock-access-gateway", "gemini-openai-endpoint"),
    }
    assert wanted <= overflowing
    assert all(c["source"] for c in VECTORS)
    assert {c["expect"] for c in VECTORS} > {"CONTEXT_WINDOW_EXCEEDED"}  # negatives too


@pytest.mark.slow
@pytest.mark.parametrize(("case", "streamed"), _runs())
def test_the_sdk_error_normalizes(case: dict[str, Any], streamed: bool) -> None:
    reply = _reply(case)
    with FakeHttpServer(reply_for=lambda _: reply) as server:
        model = _client(case, server.url)
        request = replace(ask(), on_text=lambda _: None) if streamed else ask()
        with pytest.raises(ModelError) as info:
            asyncio.run(model.complete(request))
    error = info.value
    assert error.model_code == case["expect"], error.message
    said = error.message.rpartition("): ")[2]
    assert said.strip(), error.message
    if case["expect"] != ModelErrorCode.INVALID_REQUEST:
        assert len(server.requests) == 1  # no fallback call for an overflow or a limit
    expected_status = None if "stream_events" in case else case["status"]
    assert error.details["status"] == expected_status
