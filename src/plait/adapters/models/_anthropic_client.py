"""Thin client on the official ``anthropic`` SDK (imported at the first call; its own
retries off). Every call is streamed when the model can stream, whether or not anyone
watches the text: Anthropic requires streaming for long answers (the SDK refuses a plain
call whose ``max_tokens`` could take over ten minutes, 64,000 for haiku-4-5), and a
stream keeps bytes coming, so the idle timeout only fires on a silent server."""

from __future__ import annotations

import json
from collections.abc import Callable
from functools import partial
from typing import Any, cast

from plait.adapters.models import _anthropic as messages
from plait.adapters.models._common import Target
from plait.adapters.models._driver import (
    DEFAULT_IDLE_TIMEOUT,
    STREAM_REFUSALS,
    idle_watch,
    mapped_errors,
)
from plait.adapters.models._stainless import create, sdk_errors
from plait.application.ports import ModelCapabilities, ModelRequest, ModelResponse

__all__ = ["AnthropicModel"]


class AnthropicModel:
    """``anthropic:MODEL``. ``thinking_budget`` turns extended thinking on."""

    def __init__(
        self,
        *,
        name: str,
        target: Target,
        capabilities: ModelCapabilities,
        api_key: str,
        base_url: str | None = None,
        thinking_budget: int | None = None,
        timeout: float = 600.0,
        idle_timeout: float = DEFAULT_IDLE_TIMEOUT,
    ) -> None:
        self._name = name
        self.target = target
        self._capabilities = capabilities
        self._api_key = api_key
        self._base_url = base_url
        self._thinking_budget = thinking_budget
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
        # lazy: the anthropic SDK (~2 s), at the first call, not when the model is opened
        import anthropic

        return anthropic.AsyncAnthropic(
            api_key=self._api_key, base_url=self._base_url, max_retries=0, timeout=self._timeout
        )

    @property
    def stream_refusal(self) -> str | None:
        """Why this server refused a streamed call (then plait calls it plainly)."""
        return STREAM_REFUSALS.reason(self._stream_key)

    @property
    def _stream_key(self) -> tuple[str, str]:
        return (self._base_url or "anthropic", self.target.model)

    async def complete(self, request: ModelRequest) -> ModelResponse:
        async def attempt(streamed: bool) -> ModelResponse:
            watch = idle_watch("anthropic", self._idle_timeout)
            async with self._client() as sdk, watch as alive:
                return await self._send(sdk, request, streamed, alive)

        return await STREAM_REFUSALS.call(
            self._stream_key,
            attempt,
            streaming=self._capabilities.streaming,
            on_text=request.on_text,
        )

    async def _send(
        self, sdk: Any, request: ModelRequest, streaming: bool, alive: Callable[[], None]
    ) -> ModelResponse:
        # lazy: the anthropic SDK (~2 s), at the first call, not when the model is opened
        import anthropic

        body = messages.build_request(
            self.target,
            request.context,
            max_output_tokens=request.max_output_tokens or self._capabilities.max_output_tokens,
            stream=streaming,
            thinking_budget=self._thinking_budget,
        )

        async def read(raw: Any) -> dict[str, Any]:
            return cast("dict[str, Any]", json.loads(await raw.text()))

        async with mapped_errors("anthropic", sdk_errors(anthropic, "anthropic")):
            response = await create(
                sdk.messages,
                body,
                stream=messages.MessagesStream(self.target) if streaming else None,
                on_text=request.on_text,
                read=read,
                parse=partial(messages.parse_response, self.target),
                alive=alive,
            )
        answer = request.context.output_schema
        return response if answer is None else messages.take_answer(answer, response)
