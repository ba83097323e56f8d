"""Thin client on the official ``anthropic`` SDK (imported at the first call; its own
retries off)."""

from __future__ import annotations

import json
from typing import Any

from plait.adapters.models import _anthropic as messages
from plait.adapters.models._common import Target
from plait.adapters.models._driver import is_transport_error, run_stream, transport_error
from plait.adapters.models._errors import classify
from plait.adapters.models._sse import aiter_events
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
    ) -> None:
        self._name = name
        self.target = target
        self._capabilities = capabilities
        self._api_key = api_key
        self._base_url = base_url
        self._thinking_budget = thinking_budget
        self._timeout = timeout

    @property
    def name(self) -> str:
        return self._name

    @property
    def capabilities(self) -> ModelCapabilities:
        return self._capabilities

    def _client(self) -> Any:
        """A fresh SDK client per call (its pool belongs to the running event loop)."""
        import anthropic

        return anthropic.AsyncAnthropic(
            api_key=self._api_key, base_url=self._base_url, max_retries=0, timeout=self._timeout
        )

    async def complete(self, request: ModelRequest) -> ModelResponse:
        async with self._client() as sdk:
            return await self._send(sdk, request)

    async def _send(self, sdk: Any, request: ModelRequest) -> ModelResponse:
        import anthropic

        streaming = request.on_text is not None and self._capabilities.streaming
        body = messages.build_request(
            self.target,
            request.context,
            max_output_tokens=request.max_output_tokens or self._capabilities.max_output_tokens,
            stream=streaming,
            thinking_budget=self._thinking_budget,
        )
        resource = sdk.messages
        try:
            if streaming:
                acc = messages.MessagesStream(self.target)
                async with resource.with_streaming_response.create(**body) as raw:
                    return await run_stream(aiter_events(raw.iter_lines()), acc, request.on_text)
            raw = await resource.with_raw_response.create(**body)
            return messages.parse_response(self.target, json.loads(await raw.text()))
        except anthropic.APIStatusError as e:
            payload = e.body if e.body is not None else e.message
            headers = dict(e.response.headers)
            raise classify("anthropic", e.status_code, payload, headers=headers) from e
        except anthropic.APIConnectionError as e:
            raise transport_error("anthropic", e) from e
        except anthropic.APIError as e:
            raise classify("anthropic", None, e.body if e.body is not None else e.message) from e
        except Exception as e:
            if is_transport_error(e):
                raise transport_error("anthropic", e) from e
            raise
