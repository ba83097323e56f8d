"""The SDKs' own base-URL variables (named in docs/models.md) reach a built-in model spec."""

from __future__ import annotations

import asyncio

import pytest

from plait.adapters.models import open_model
from plait.config import Config
from plait.testing.fake_providers import FakeProvider, FakeTurn
from tests.adapters._clients import KEYS, SPECS, ask

BASE_URL_VARIABLES = {
    "openai": "OPENAI_BASE_URL",
    "openai-responses": "OPENAI_BASE_URL",
    "anthropic": "ANTHROPIC_BASE_URL",
    "gemini": "GOOGLE_GEMINI_BASE_URL",
}


@pytest.mark.slow
@pytest.mark.parametrize("dialect", list(BASE_URL_VARIABLES))
def test_the_sdks_base_url_variable_redirects_a_builtin_spec(
    dialect: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = SPECS[dialect]
    with FakeProvider(dialect, [FakeTurn(text="hi")]) as fake:
        monkeypatch.setenv(BASE_URL_VARIABLES[dialect], fake.base_url)
        model = open_model(spec, config=Config(), env={KEYS[spec]: "test-key"})
        response = asyncio.run(model.complete(ask()))
    assert response.text == "hi"
    assert len(fake.requests) == 1
