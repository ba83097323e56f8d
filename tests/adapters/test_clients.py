"""The SDK clients talk real HTTP to a fake provider on 127.0.0.1."""

from __future__ import annotations

import asyncio

import pytest

from plait.adapters.models import open_model
from plait.config import Config
from plait.domain.errors import ConfigError, ModelError, ModelErrorCode
from plait.testing.fake_providers import FakeProvider, FakeTurn, rate_limited
from tests.adapters._cassettes import tool
from tests.adapters._clients import SPECS, ask, client_for

DIALECTS = list(SPECS)
READ = tool(
    "read_file",
    {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
)
TURN = FakeTurn(text="Let me look at it.", calls=(("call_1", "read_file", {"path": "a.txt"}),))


@pytest.mark.slow
@pytest.mark.parametrize("dialect", DIALECTS)
def test_plain_call(dialect: str) -> None:
    with FakeProvider(dialect, [TURN]) as fake:
        model = client_for(dialect, fake.base_url)
        response = asyncio.run(model.complete(ask((READ,))))
    assert response.text == "Let me look at it."
    ((call),) = response.tool_calls
    assert call.name == "read_file" and call.id
    assert call.arguments in ('{"path": "a.txt"}', {"path": "a.txt"})
    assert response.usage.input_tokens == 100
    (request,) = fake.requests
    auth = (
        request.headers.get("authorization")
        or request.headers.get("x-api-key")
        or (request.headers.get("x-goog-api-key"))
    )
    assert auth is not None and "test-key" in auth


@pytest.mark.slow
@pytest.mark.parametrize("dialect", DIALECTS)
def test_stream_shows_text_and_returns_the_whole_message(dialect: str) -> None:
    shown: list[str] = []
    with FakeProvider(dialect, [TURN]) as fake:
        model = client_for(dialect, fake.base_url)
        request = ask((READ,))
        from dataclasses import replace

        response = asyncio.run(model.complete(replace(request, on_text=shown.append)))
    assert len(shown) > 1 and "".join(shown) == response.text == "Let me look at it."
    assert [c.name for c in response.tool_calls] == ["read_file"]


@pytest.mark.slow
@pytest.mark.parametrize("dialect", DIALECTS)
def test_429_with_retry_after_is_classified_and_not_retried_by_the_sdk(dialect: str) -> None:
    with FakeProvider(dialect, [TURN]) as fake:
        fake.fail_first(rate_limited(dialect, retry_after_ms=50))
        model = client_for(dialect, fake.base_url)
        with pytest.raises(ModelError) as info:
            asyncio.run(model.complete(ask()))
    assert len(fake.requests) == 1  # the SDK's own retries are off
    error = info.value
    assert error.model_code == ModelErrorCode.RATE_LIMITED
    assert error.details["status"] == 429
    assert error.details["body"]
    assert error.retry_after == 0.05


@pytest.mark.slow
@pytest.mark.parametrize("dialect", DIALECTS)
def test_a_stream_cut_off_midway_is_a_transient_error(dialect: str) -> None:
    from dataclasses import replace

    with FakeProvider(dialect, [TURN]) as fake:
        fake.cut_stream_at[0] = 3
        model = client_for(dialect, fake.base_url)
        with pytest.raises(ModelError) as info:
            asyncio.run(model.complete(replace(ask((READ,)), on_text=lambda _: None)))
    assert info.value.model_code == ModelErrorCode.TRANSIENT


@pytest.mark.parametrize("spec", sorted(set(SPECS.values())))
def test_a_missing_key_names_the_variable(spec: str) -> None:
    with pytest.raises(ConfigError) as info:
        open_model(spec, config=Config(), env={})
    assert info.value.details["variable"] in info.value.message
    assert info.value.details["variable"].endswith("_API_KEY")


@pytest.mark.slow
def test_an_unreachable_server_is_transient() -> None:
    with FakeProvider("openai", []) as fake:
        url = fake.base_url
    model = open_model(f"openai-compatible:{url}#any", config=Config(), env={})
    with pytest.raises(ModelError) as info:
        asyncio.run(model.complete(ask()))
    assert info.value.model_code == ModelErrorCode.TRANSIENT


@pytest.mark.slow
@pytest.mark.parametrize("streamed", [False, True], ids=["plain", "streamed"])
def test_gemini_speaks_the_pinned_api_version(
    streamed: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """v1beta, whatever the SDK's default (v1) or GOOGLE_GENAI_API_VERSION says: thought
    signatures and parametersJsonSchema need it."""
    from dataclasses import replace

    monkeypatch.setenv("GOOGLE_GENAI_API_VERSION", "v1")
    with FakeProvider("gemini", [TURN]) as fake:
        model = client_for("gemini", fake.base_url)
        request = ask((READ,))
        if streamed:
            request = replace(request, on_text=lambda _: None)
        asyncio.run(model.complete(request))
    (sent,) = fake.requests
    method = "streamGenerateContent" if streamed else "generateContent"
    assert sent.path.split("?")[0] == f"/v1beta/models/gemini-2.5-pro:{method}"
    (declaration,) = sent.body["tools"][0]["functionDeclarations"]
    assert {"parametersJsonSchema", "parameters_json_schema"} & set(declaration)


@pytest.mark.slow
def test_anthropic_streams_even_when_nobody_watches_the_text() -> None:
    """--json, scripts and workers pass no text sink: the call is still streamed (a long
    max_tokens must be), and the assembled message is the same."""
    from dataclasses import replace

    with FakeProvider("anthropic", [TURN, TURN]) as fake:
        model = client_for("anthropic", fake.base_url)
        response = asyncio.run(model.complete(replace(ask((READ,)), max_output_tokens=64_000)))
        plain = client_for("anthropic", fake.base_url, streaming=False)
        same = asyncio.run(plain.complete(ask((READ,))))
    streamed, declined = fake.requests
    assert streamed.body["stream"] is True and streamed.body["max_tokens"] == 64_000
    assert "stream" not in declined.body  # a model declared not to stream is called plainly
    assert response.text == same.text == "Let me look at it."
    assert [c.name for c in response.tool_calls] == ["read_file"]
    assert response.tool_calls[0].arguments == {"path": "a.txt"}
