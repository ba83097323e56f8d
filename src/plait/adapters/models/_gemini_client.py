"""Thin client on the official ``google-genai`` SDK (imported at the first call; retries
off: one attempt). The converter speaks the REST shape; the SDK's pydantic types take and
give that shape in JSON mode (camelCase, bytes as base64)."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Callable
from typing import Any

from plait.adapters.models import _gemini as gemini
from plait.adapters.models._common import Target
from plait.adapters.models._driver import (
    DEFAULT_IDLE_TIMEOUT,
    idle_watch,
    mapped_errors,
    run_stream,
)
from plait.adapters.models._errors import classify
from plait.application.ports import ModelCapabilities, ModelRequest, ModelResponse
from plait.domain.errors import ModelError, ModelErrorCode

__all__ = ["API_VERSION", "GeminiModel"]

API_VERSION = "v1beta"
"""The Gemini API version plait speaks, pinned: thought signatures and
``parametersJsonSchema`` tool parameters are ``v1beta`` features (the recorded exchanges
are ``v1beta``), while the SDK defaults to ``v1`` and lets ``GOOGLE_GENAI_API_VERSION``
pick another."""

_DELAY = re.compile(r"^(\d+(?:\.\d+)?)s$")


def _retry_delay(details: object) -> float | None:
    """Gemini's 429 carries ``google.rpc.RetryInfo`` with ``retryDelay: "3s"``."""
    for item in (
        ((details or {}).get("error") or {}).get("details") or ()
        if isinstance(details, dict)
        else ()
    ):
        found = _DELAY.match(str(item.get("retryDelay", ""))) if isinstance(item, dict) else None
        if found:
            return float(found.group(1))
    return None


class GeminiModel:
    """``gemini:MODEL``."""

    def __init__(
        self,
        *,
        name: str,
        target: Target,
        capabilities: ModelCapabilities,
        api_key: str,
        base_url: str | None = None,
        timeout: float = 600.0,
        idle_timeout: float = DEFAULT_IDLE_TIMEOUT,
    ) -> None:
        self._name = name
        self.target = target
        self._capabilities = capabilities
        self._api_key = api_key
        self._base_url = base_url
        self._timeout = timeout
        self._idle_timeout = idle_timeout

    @property
    def name(self) -> str:
        return self._name

    @property
    def capabilities(self) -> ModelCapabilities:
        return self._capabilities

    def _client(self) -> Any:
        """A fresh SDK client per call (its pool belongs to the running event loop)."""
        # lazy: the google-genai SDK (~1.2 s), at the first call, not when the model is opened
        from google import genai
        from google.genai import types

        options = types.HttpOptions(
            base_url=self._base_url,
            api_version=API_VERSION,
            timeout=int(self._timeout * 1000),
            retry_options=types.HttpRetryOptions(attempts=1),
        )
        return genai.Client(api_key=self._api_key, http_options=options).aio

    def _sdk_args(self, body: dict[str, Any]) -> dict[str, Any]:
        # lazy: the google-genai SDK (~1.2 s), at the first call
        from google.genai import types

        config: dict[str, Any] = dict(body.get("generationConfig") or {})
        for key in ("systemInstruction", "tools"):
            if key in body:
                config[key] = body[key]
        contents = [types.Content.model_validate_json(json.dumps(c)) for c in body["contents"]]
        return {
            "model": self.target.model,
            "contents": contents,
            "config": types.GenerateContentConfig.model_validate_json(json.dumps(config)),
        }

    async def _chunks(
        self, sdk: Any, args: dict[str, Any], alive: Callable[[], None]
    ) -> AsyncIterator[dict[str, Any]]:
        async for chunk in await sdk.models.generate_content_stream(**args):
            alive()
            yield chunk.model_dump(mode="json", by_alias=True, exclude_none=True)

    async def complete(self, request: ModelRequest) -> ModelResponse:
        async with self._client() as sdk, idle_watch("gemini", self._idle_timeout) as alive:
            return await self._send(sdk, request, alive)

    async def _send(
        self, sdk: Any, request: ModelRequest, alive: Callable[[], None]
    ) -> ModelResponse:
        streaming = request.on_text is not None and self._capabilities.streaming
        body = gemini.build_request(
            self.target, request.context, max_output_tokens=request.max_output_tokens
        )
        args = self._sdk_args(body)
        async with mapped_errors("gemini", _sdk_error):
            if streaming:
                acc = gemini.GenerateStream(self.target)
                return await run_stream(self._chunks(sdk, args, alive), acc, request.on_text)
            response = await sdk.models.generate_content(**args)
            wire = response.model_dump(mode="json", by_alias=True, exclude_none=True)
            return gemini.parse_response(self.target, wire)


def _sdk_error(exc: Exception) -> ModelError | None:
    """``google.genai``'s APIError as a ModelError, with the retry delay of a 429."""
    # lazy: the google-genai SDK (~1.2 s), loaded by then if a call was made
    from google.genai import errors

    if not isinstance(exc, errors.APIError):
        return None
    headers = getattr(getattr(exc, "response", None), "headers", None)
    error = classify("gemini", exc.code or None, exc.details, headers=dict(headers or {}))
    if error.model_code == ModelErrorCode.RATE_LIMITED and error.retry_after is None:
        error.details["retry_after"] = _retry_delay(exc.details)
    return error
