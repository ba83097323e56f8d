r"""What every thin client shares: running a stream through its accumulator, and the one
shell that turns its SDK's failures into :class:`ModelError`\ s (transport failures such
as a connection reset, a cut-off body or a timeout into retryable ones)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any, Protocol

from plait.application.ports import ModelResponse, TextSink
from plait.domain.errors import ConfigError, ModelError, ModelErrorCode

__all__ = [
    "Accumulator",
    "Translate",
    "is_transport_error",
    "mapped_errors",
    "missing_key",
    "run_stream",
    "transport_error",
]

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


Translate = Callable[[Exception], ModelError | None]
"""A client's own SDK exceptions as ModelErrors (None: not one of them)."""


@asynccontextmanager
async def mapped_errors(provider: str, translate: Translate) -> AsyncIterator[None]:
    """Around one model call: an SDK exception leaves as the ModelError ``translate``
    makes of it, one from the transport layer as a retryable ``TRANSIENT``, each
    ``from`` the original; anything else passes through unchanged."""
    try:
        yield
    except Exception as e:
        error = translate(e)
        if error is None and is_transport_error(e):
            error = transport_error(provider, e)
        if error is None:
            raise
        raise error from e


def missing_key(model: str, variable: str) -> ConfigError:
    return ConfigError(
        f"model {model!r} needs an API key: set {variable} (or name another variable "
        "with key_env in plait.toml)",
        model=model,
        variable=variable,
    )
