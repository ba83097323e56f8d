"""Thin client on the official ``openai`` SDK, for Chat Completions (also every
OpenAI-compatible server) and Responses: the wire protocol is a value handed in. The SDK
is imported when the first call is made; its own retries are off (plait's ModelCaller
counts and paces attempts)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, cast

from plait.adapters.models import _openai_chat as chat
from plait.adapters.models import _openai_responses as responses
from plait.adapters.models._common import Target
from plait.adapters.models._driver import (
    DEFAULT_IDLE_TIMEOUT,
    STREAM_REFUSALS,
    Accumulator,
    idle_watch,
    mapped_errors,
)
from plait.adapters.models._stainless import create, sdk_errors
from plait.application.ports import ModelCapabilities, ModelRequest, ModelResponse
from plait.domain.record import record

__all__ = ["CHAT", "RESPONSES", "OpenAIModel", "WireProtocol"]


@record
class WireProtocol:
    build: Callable[[Target, ModelRequest, bool, ModelCapabilities, str], dict[str, Any]]
    parse: Callable[[Target, dict[str, Any], str], ModelResponse]
    stream: Callable[[Target, str], Accumulator]
    resource: Callable[[Any], Any]


def _chat_body(
    target: Target, request: ModelRequest, stream: bool, caps: ModelCapabilities, field: str
) -> dict[str, Any]:
    return chat.build_request(
        target,
        request.context,
        max_output_tokens=request.max_output_tokens,
        stream=stream,
        max_tokens_field=field,
    )


def _responses_body(
    target: Target, request: ModelRequest, stream: bool, caps: ModelCapabilities, field: str
) -> dict[str, Any]:
    return responses.build_request(
        target,
        request.context,
        max_output_tokens=request.max_output_tokens,
        stream=stream,
        reasoning=caps.reasoning,
    )


CHAT = WireProtocol(
    build=_chat_body,
    parse=chat.parse_response,
    stream=chat.ChatStream,
    resource=lambda sdk: sdk.chat.completions,
)
RESPONSES = WireProtocol(
    build=_responses_body,
    parse=responses.parse_response,
    stream=responses.ResponsesStream,
    resource=lambda sdk: sdk.responses,
)


class OpenAIModel:
    """``openai:MODEL``, ``openai-compatible:BASE_URL#MODEL`` (protocol :data:`CHAT`) and
    ``openai-responses:MODEL`` (:data:`RESPONSES`)."""

    def __init__(
        self,
        *,
        name: str,
        target: Target,
        protocol: WireProtocol,
        capabilities: ModelCapabilities,
        api_key: str,
        base_url: str | None = None,
        provider: str = "openai",
        max_tokens_field: str = "max_completion_tokens",
        timeout: float = 600.0,
        idle_timeout: float = DEFAULT_IDLE_TIMEOUT,
    ) -> None:
        self._name = name
        self.target = target
        self._protocol = protocol
        self._capabilities = capabilities
        self._api_key = api_key
        self._base_url = base_url
        self._provider = provider
        self._max_tokens_field = max_tokens_field
        self._timeout = timeout
        self._idle_timeout = idle_timeout

    @property
    def name(self) -> str:
        return self._name

    @property
    def capabilities(self) -> ModelCapabilities:
        return self._capabilities

    def _client(self) -> Any:
        """A fresh SDK client per call, closed after it: its connection pool belongs to
        the running event loop, and a CLI process runs one loop per command."""
        # lazy: the openai SDK (~0.8 s), at the first call, not when the model is opened
        import openai

        return openai.AsyncOpenAI(
            api_key=self._api_key, base_url=self._base_url, max_retries=0, timeout=self._timeout
        )

    @property
    def stream_refusal(self) -> str | None:
        """Why this server refused a streamed call (then plait calls it plainly)."""
        return STREAM_REFUSALS.reason(self._stream_key)

    @property
    def _stream_key(self) -> tuple[str, str]:
        return (self._base_url or self._provider, self.target.model)

    async def complete(self, request: ModelRequest) -> ModelResponse:
        protocol = self._protocol

        async def attempt(streamed: bool) -> ModelResponse:
            caps, field = self._capabilities, self._max_tokens_field
            body = protocol.build(self.target, request, streamed, caps, field)
            watch = idle_watch(self._provider, self._idle_timeout)
            async with self._client() as sdk, watch as alive:
                return await self._send(protocol.resource(sdk), body, request, alive)

        streaming = request.on_text is not None and self._capabilities.streaming
        return await STREAM_REFUSALS.call(
            self._stream_key, attempt, streaming=streaming, on_text=request.on_text
        )

    async def _send(
        self,
        resource: Any,
        body: dict[str, Any],
        request: ModelRequest,
        alive: Callable[[], None],
    ) -> ModelResponse:
        # lazy: the openai SDK (~0.8 s), at the first call, not when the model is opened
        import openai

        protocol = self._protocol

        async def read(raw: Any) -> dict[str, Any]:
            return cast("dict[str, Any]", json.loads(raw.text))

        async with mapped_errors(self._provider, sdk_errors(openai, self._provider)):
            return await create(
                resource,
                body,
                stream=protocol.stream(self.target, self._provider) if body.get("stream") else None,
                on_text=request.on_text,
                read=read,
                parse=lambda wire: protocol.parse(self.target, wire, self._provider),
                alive=alive,
            )
