"""What every thin client shares: running a stream through its accumulator, and turning
transport failures (connection reset, cut-off body, timeout) into retryable errors."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, Protocol

from plait.application.ports import ModelResponse, TextSink
from plait.domain.errors import ConfigError, ModelError, ModelErrorCode

__all__ = ["Accumulator", "is_transport_error", "missing_key", "run_stream", "transport_error"]

_TRANSPORT_MODULES = frozenset({"httpx", "httpx2", "httpcore", "aiohttp", "h11", "anyio"})


class Accumulator(Protocol):
    def feed(self, event: dict[str, Any]) -> str | None: ...

    def finish(self) -> ModelResponse: ...


async def run_stream(
    events: AsyncIterator[dict[str, Any]], acc: Accumulator, on_text: TextSink | None
) -> ModelResponse:
    """Feed every event; show text deltas; the complete response or a ModelError."""
    async for event in events:
        delta = acc.feed(event)
        if delta and on_text is not None:
            on_text(delta)
    return acc.finish()


def is_transport_error(e: BaseException) -> bool:
    return any(c.__module__.split(".")[0] in _TRANSPORT_MODULES for c in type(e).__mro__)


def transport_error(provider: str, e: BaseException) -> ModelError:
    return ModelError(
        f"{provider}: connection failed or was cut off ({type(e).__name__}: {e})",
        model_code=ModelErrorCode.TRANSIENT,
        status=None,
        body=None,
        provider=provider,
    )


def missing_key(model: str, variable: str) -> ConfigError:
    return ConfigError(
        f"model {model!r} needs an API key: set {variable} (or name another variable "
        "with key_env in plait.toml)",
        model=model,
        variable=variable,
    )
